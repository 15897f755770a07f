"""The console when things are wrong (issue 29): a broker down at start or gone later, an
inbox in another database, and the numbers an operator had to decode.

Real broker_lite processes, SQLite outbox and inbox databases, and the console on a
real socket (``rocketbox console`` as a process where its start-up is the point).
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, update

from outbox import Outbox, publish
from outbox.console import ConsoleConfig, ConsoleThread
from outbox.models import inbox_table
from outbox.models import transaction_table as t
from procgroup import Process
from tests.support import free_port, start_broker_lite, wait_until
from tests.support.sqlite import sqlite_outbox_engine
from tests.support.web_client import WebSession

pytestmark = pytest.mark.timeout(120)


def _outbox_db(path: Path, broker: str) -> tuple[Engine, str, str]:
    """A SQLite outbox with one parked row and one row relayed after 3 attempts."""
    engine = sqlite_outbox_engine(path)
    outbox = Outbox(engine=engine, broker=broker)
    with engine.begin() as conn:
        parked = publish(conn, "Refunds", {"refund": 1}, outbox=outbox)
        relayed = publish(conn, "Orders", {"order": 1}, outbox=outbox)
        conn.execute(update(t).where(t.c.tx_id == parked).values(parked=True, attempts=5))
        conn.execute(update(t).where(t.c.tx_id == relayed).values(
            attempts=3, relayed_at=datetime.now(UTC), last_error="broker busy"))
    return engine, parked, relayed


@pytest.fixture
def console_process(tmp_path: Path) -> Iterator[tuple[Process, str, str]]:
    """``rocketbox console`` started against a broker address nothing listens on."""
    port = free_port()
    engine, parked, _ = _outbox_db(tmp_path / "outbox.db", f"127.0.0.1:{port}")
    engine.dispose()
    argv = [sys.executable, "-m", "outbox", "console", "--broker", f"127.0.0.1:{port}",
            "--db", f"sqlite:///{tmp_path / 'outbox.db'}", "--port", "0",
            "--sample-seconds", "0.5"]
    proc = Process(argv, log=tmp_path / "console.log", stderr=tmp_path / "console.err",
                   name="console").start()
    try:
        ready = proc.wait_for(re.compile(r"rocketbox console ready url=(?P<url>\S+)"), 60)
        yield proc, ready["url"], parked
    finally:
        proc.stop(signal.SIGTERM, 20)


def test_the_console_starts_with_the_broker_down_shows_it_and_keeps_the_outbox_pages(
        console_process: tuple[Process, str, str]) -> None:
    proc, url, parked = console_process
    web = WebSession(url)
    overview = wait_until(lambda: (lambda page: page if "broker:" in page else None)(
        web.request("/")[1]), timeout=30, message="the overview never said the broker is down")
    assert "unreachable" in overview
    status, rows, _ = web.request("/rows?state=parked")
    assert status == 200 and parked in rows
    for path in ("/topics", "/groups", "/transactions", "/dlq"):
        status, page, _ = web.request(path)
        assert status == 503, (path, status)
        assert "Broker unreachable" in page and "/rows" in page
    assert "Traceback" not in proc.errors()


def test_a_broker_that_stops_under_the_console_is_shown_as_an_outage(tmp_path: Path) -> None:
    with start_broker_lite(tmp_path / "broker") as broker:
        engine, parked, _ = _outbox_db(tmp_path / "outbox.db", broker.native)
        console = ConsoleThread(ConsoleConfig(broker=broker.native, port=0, sample_seconds=0.5),
                                engine=engine).start()
        try:
            web = WebSession(console.url)
            for path in ("/topics", "/groups"):
                assert web.request(path)[0] == 200
            broker.stop()

            def outage(path: str) -> str | None:
                status, page, _ = web.request(path)
                assert status in (200, 503), (path, status, page[:300])
                return page if status == 503 else None

            for path in ("/topics", "/groups"):
                page = wait_until(lambda p=path: outage(p), timeout=60)
                assert "Broker unreachable" in page and broker.native in page
            status, rows, _ = web.request("/rows?state=parked")
            assert status == 200 and parked in rows
        finally:
            console.stop()
            engine.dispose()


def test_the_trace_finds_inbox_rows_in_the_databases_named_with_inbox_db(
        tmp_path: Path) -> None:
    with start_broker_lite(tmp_path / "broker") as broker:
        engine, _, relayed = _outbox_db(tmp_path / "outbox.db", broker.native)
        billing = sqlite_outbox_engine(tmp_path / "billing.db")  # the consumer's own database
        with billing.begin() as conn:
            conn.execute(insert(inbox_table).values(consumer_group="billing", tx_id=relayed,
                                                    processed_at=datetime.now(UTC)))
        billing.dispose()
        plain = ConsoleThread(ConsoleConfig(broker=broker.native, port=0, sample_seconds=60),
                              engine=engine).start()
        try:
            _, page, _ = WebSession(plain.url).request(f"/trace/{relayed}")
            assert "no inbox row in outbox database" in page
        finally:
            plain.stop()
        from outbox.cli import build_parser
        from outbox.console.command import config_from

        args = build_parser().parse_args([
            "console", "--broker", broker.native, "--port", "0", "--sample-seconds", "60",
            "--inbox-db", f"billing=sqlite:///{tmp_path / 'billing.db'}",
            "--inbox-db", f"shipping=sqlite:///{tmp_path / 'missing' / 'shipping.db'}"])
        config = config_from(args)
        wide = ConsoleThread(config, engine=engine).start()
        try:
            status, page, _ = WebSession(wide.url).request(f"/trace/{relayed}")
            assert status == 200
            inbox = page.split('id="trace-inbox"', 1)[1].split("</table>", 1)[0]
            assert "<td>billing</td><td>billing</td>" in inbox, inbox
            assert "searched: outbox database, billing, shipping" in page
            assert "inbox: shipping: OperationalError" in page  # named, not a 500
        finally:
            wide.stop()
            engine.dispose()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href and href.startswith("/"):
            self.links.add(href.split("#", 1)[0])


def test_numbers_are_decoded_and_every_link_resolves(tmp_path: Path) -> None:
    with start_broker_lite(tmp_path / "broker", ("--no-auto-create-topics",)) as broker:
        engine, parked, relayed = _outbox_db(tmp_path / "outbox.db", broker.native)
        console = ConsoleThread(ConsoleConfig(broker=broker.native, port=0, sample_seconds=0.5),
                                engine=engine).start()
        try:
            web = WebSession(console.url)
            _, topics, _ = web.request("/topics")
            perms = re.findall(r'<td title="permission bits (\d+)">([^<]+)</td>', topics)
            assert perms and ("6", "read, write") in perms, topics[:3000]
            assert not re.search(r"<td>\d+</td><td>\d+</td><td>6</td>", topics)
            disk = re.compile(r'id="card-disk".*?<span class="value">[\d.]+ [KMG]?i?B</span>')
            overview = wait_until(lambda: (lambda p: p if disk.search(p) else None)(
                web.request("/overview/cards")[1]), timeout=30)
            card = overview.split('id="card-disk"', 1)[1].split("</a>", 1)[0]
            assert "preallocated" in card
            _, trace, _ = web.request(f"/trace/{relayed}")
            attempts = trace.split('id="trace-attempts">', 1)[1].split("</td>", 1)[0]
            assert "next attempt" not in attempts and "relayed" in attempts, attempts
            events = trace.split('id="trace-events"', 1)[1].split("</table>", 1)[0]
            assert "next at this time" not in events
            _, parked_trace, _ = web.request(f"/trace/{parked}")
            assert "next attempt" not in parked_trace.split('id="trace-attempts">', 1)[1][:200]
            seen: set[str] = set()
            todo = {"/"}
            while todo:
                path = todo.pop()
                seen.add(path)
                status, page, _ = web.request(path)
                assert status in (200, 303), (path, status)
                parser = _Links()
                parser.feed(page)
                todo |= {link for link in parser.links
                         if link not in seen and not link.startswith("/static/")}
            assert {"/", "/rows", "/topics", "/groups", "/audit"} <= seen
            assert not any("metrics" in link for link in seen)
        finally:
            console.stop()
            engine.dispose()
