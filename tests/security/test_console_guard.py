"""The console against a browser-borne attacker (issue 27, item 7 and the console's "lower"
items): Host, Origin, another session's CSRF token, non-numbers, secrets in ``--help``,
metrics on loopback, the broker's own console holding admin keys.

A real broker_lite, a SQLite outbox with one parked row, and the console on a real
socket; every attack is followed by the owner doing the same thing the right way.
The framing attack, with a real browser, is in ``test_console_frames.py``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update

from outbox import Outbox, publish
from outbox.console import ConsoleConfig, ConsoleThread
from outbox.models import transaction_table as t
from tests.support import BrokerLiteServer, start_broker_lite, wait_until
from tests.support.attack import ACCOUNTS, SECRETS
from tests.support.sqlite import sqlite_outbox_engine
from tests.support.web_client import NO_ORIGIN, WebSession, basic_auth, csrf_of

pytestmark = pytest.mark.timeout(120)


@dataclass
class Site:
    console: ConsoleThread
    engine: Engine
    parked: str

    @property
    def base(self) -> str:
        return self.console.url

    def is_parked(self) -> bool:
        with self.engine.connect() as conn:
            return bool(conn.execute(select(t.c.parked).where(t.c.tx_id == self.parked))
                        .scalar_one())


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    engine = sqlite_outbox_engine(tmp_path / "outbox.db")
    with start_broker_lite(tmp_path / "broker") as broker:
        outbox = Outbox(engine=engine, broker=broker.native)
        with engine.begin() as conn:
            parked = publish(conn, "Refunds", {"refund": 1}, outbox=outbox)
            conn.execute(update(t).where(t.c.tx_id == parked).values(
                parked=True, attempts=5, last_error="topic 'Refunds' does not exist"))
        console = ConsoleThread(ConsoleConfig(
            broker=broker.native, port=0, sample_seconds=60,
            allowed_hosts=("console.internal",)), engine=engine).start()
        try:
            yield Site(console, engine, parked)
        finally:
            console.stop()
            engine.dispose()


def _replay(session: WebSession, tx_id: str, **options: str) -> tuple[int, str]:
    """The two POSTs of a replay (ask, confirm) as the page's forms send them."""
    status, page, _ = session.request("/rows?state=parked")
    assert status == 200, page[:500]
    status, confirm, _ = session.request("/rows/replay", [("csrf", csrf_of(page)),
                                                          ("tx_id", tx_id)])
    if status != 200:
        return status, confirm
    token = options.get("csrf", csrf_of(confirm))
    status, body, _ = session.request(
        "/rows/replay", [("tx_id", tx_id), ("csrf", token), ("confirm", "yes")],
        origin=options.get("origin"))
    return status, body


def test_a_foreign_host_header_is_refused_and_the_allowed_names_answer(site: Site) -> None:
    port = site.console.port
    for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.2", "example.com."):
        status, body, headers = WebSession(site.base, {"Host": host}).request("/rows")
        assert status == 421, (host, status)
        assert "--allowed-host" in body
        assert headers.get("x-frame-options") == "DENY"
        status, _, _ = WebSession(site.base, {"Host": host}).request(
            "/rows/replay", [("tx_id", site.parked)])
        assert status == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "console.internal",
                 f"console.internal:{port}"):
        status, body, _ = WebSession(site.base, {"Host": host}).request("/rows?state=parked")
        assert status == 200 and site.parked in body, host
    assert site.is_parked()


def test_a_post_without_the_consoles_origin_is_refused(site: Site) -> None:
    for origin in (NO_ORIGIN, "http://127.0.0.1:9", "http://attacker.example", "null"):
        status, body = _replay(WebSession(site.base), site.parked, origin=origin)
        assert status == 403, (origin, status, body[:300])
        assert "Origin" in body
    assert site.is_parked()
    status, _ = _replay(WebSession(site.base), site.parked)  # the owner, from the page
    assert status == 303
    assert not site.is_parked()


def test_a_csrf_token_of_another_session_is_refused(site: Site) -> None:
    attacker, owner = WebSession(site.base), WebSession(site.base)
    _, page, headers = attacker.request("/rows?state=parked")
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
    attackers_token = csrf_of(page)
    status, body = _replay(owner, site.parked, csrf=attackers_token)
    assert status == 403 and "CSRF" in body
    assert site.is_parked()
    _, owners_page, _ = owner.request("/rows?state=parked")
    assert csrf_of(owners_page) != attackers_token
    status, _ = _replay(owner, site.parked)
    assert status == 303
    assert not site.is_parked()


def test_rows_refuse_a_number_that_is_not_finite(site: Site) -> None:
    session = WebSession(site.base)
    for bad in ("nan", "NaN", "inf", "-inf", "-5", "soon"):
        status, body, _ = session.request(f"/rows?older_than_minutes={bad}")
        assert status == 400, (bad, status)
        assert "older_than_minutes" in body
    status, body, _ = session.request("/rows?older_than_minutes=0&state=parked")
    assert status == 200 and site.parked in body


def _subcommands(module: str) -> list[str]:
    parser = importlib.import_module(f"{module}.cli").build_parser()
    return [name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices]


def test_no_help_prints_a_secret() -> None:
    marker = "hunter2-SECRET"
    env = {**os.environ, "ROCKETBOX_CONSOLE_TOKEN": marker + "-token",
           "ROCKETBOX_SECRET_KEY": marker + "-sk", "ROCKETBOX_ACCESS_KEY": marker + "-ak",
           "ROCKETBOX_DB_URL": f"postgresql://u:{marker}-pw@db/app"}
    helps = 0
    for module in ("outbox", "broker_lite"):
        for command in _subcommands(module):
            done = subprocess.run([sys.executable, "-m", module, command, "--help"],
                                  capture_output=True, text=True, timeout=60, env=env,
                                  check=False)
            assert done.returncode == 0, (module, command, done.stderr[-500:])
            assert marker not in done.stdout + done.stderr, (module, command)
            helps += 1
    assert helps >= 10
    # the token from the environment still works
    done = subprocess.run([sys.executable, "-c", (
        "import argparse, os; from outbox.cli import build_parser; "
        "from outbox.console.command import config_from; "
        "args = build_parser().parse_args(['console', '--broker', '127.0.0.1:1']); "
        "print(config_from(args).token)")], capture_output=True, text=True, timeout=60, env=env,
        check=True)
    assert done.stdout.strip() == marker + "-token"


def test_metrics_listen_on_loopback_unless_told() -> None:
    from outbox.cli import build_parser
    from outbox.metrics import start_metrics_server

    args = build_parser().parse_args(["relay", "--metrics-port", "0"])
    assert args.metrics_addr == "127.0.0.1"
    server = start_metrics_server(0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
        server.server_close()


def test_the_brokers_console_with_admin_keys_asks_for_them_on_loopback(tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACCOUNTS))
    args = ("--acl", str(acl), "--console-port", "0", "--console-access-key", "root",
            "--console-secret-key", SECRETS["root"], "--console-allowed-host", "ops.internal")
    with start_broker_lite(tmp_path / "broker", args) as broker:
        url = _console_url(broker)
        anyone = WebSession(url)
        for path in ("/topics", "/dlq", "/groups", "/transactions"):
            status, _, headers = anyone.request(path)
            assert status == 401, path
            assert "Basic" in headers.get("www-authenticate", "")
        status, _, _ = anyone.request("/topics/create", {"topic": "Stolen", "queues": "1"})
        assert status == 401
        bob = WebSession(url, basic_auth("bob", SECRETS["bob"]))  # an ACL account, not admin
        assert bob.request("/topics")[0] == 401
        root = WebSession(url, basic_auth("root", SECRETS["root"]))
        status, page, _ = root.request("/topics")
        assert status == 200
        status, confirm, _ = root.request("/topics/create", {"csrf": csrf_of(page),
                                                             "topic": "Owned", "queues": "1"})
        assert status == 200
        status, _, _ = root.request("/topics/create", {"csrf": csrf_of(confirm), "topic": "Owned",
                                                       "queues": "1", "confirm": "yes"})
        assert status == 303
        assert "Owned" in root.request("/topics")[1]
        assert "Stolen" not in root.request("/topics")[1]
        assert WebSession(url, {"Host": "attacker.example", **basic_auth(
            "root", SECRETS["root"])}).request("/topics")[0] == 421
        assert WebSession(url, {"Host": "ops.internal", **basic_auth(
            "root", SECRETS["root"])}).request("/topics")[0] == 200


def _console_url(broker: BrokerLiteServer) -> str:
    def found() -> str | None:
        match = re.search(r"console listening on (http://\S+)", broker.stderr_text())
        return match[1] if match else None

    return str(wait_until(found, timeout=60, message=broker.stderr_text))
