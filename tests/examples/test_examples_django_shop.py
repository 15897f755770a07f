"""examples/django_shop as its README runs it: embedded (SQLite) and PostgreSQL + Redis."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.examples.examples_support import (
    READY_TIMEOUT,
    example_env,
    http,
    postgres_and_redis,
    run,
    running,
    start_shop,
    wait_reserved,
)
from tests.support import BrokerLiteServer, PostgresServer, wait_until

PY = sys.executable
MANAGE = [PY, "-m", "examples.django_shop.manage"]


def _post(address: str, payload: dict[str, Any]) -> tuple[int, Any]:
    return http(address, "POST", "/orders", payload)


def _exercise(env: dict[str, str], tmp: Path, inventory_url: str) -> None:
    run([*MANAGE, "migrate", "--verbosity", "0"], env, tmp)
    assert run([*MANAGE, "check"], env, tmp).strip().startswith("System check identified no")
    with contextlib.ExitStack() as stack:
        relay, address = start_shop(
            stack, env, tmp, relay=[*MANAGE, "rocketbox_relay"],
            checker=[*MANAGE, "rocketbox_checker"], checker_ready="rocketbox checker ready",
            inventory=[*MANAGE, "inventory"], web=[*MANAGE, "serve", "--port", "0"])
        created = []
        for i in range(5):
            status, body = _post(address, {"item": "cake", "qty": i + 1})
            assert status == 201, body
            created.append(body["ref"])
        assert _post(address, {"item": "unicorn", "ref": "bad-1"})[0] == 422
        assert _post(address, {"item": "tea", "qty": 50, "ref": "bad-2"})[0] == 409
        wait_reserved(inventory_url, created, relay, ignore=(Exception,))
        status_json = json.loads(run([*MANAGE, "rocketbox_status", "--json"], env, tmp))
        assert status_json["totals"]["parked"] == 0


@pytest.mark.timeout(300)
def test_django_shop_on_the_embedded_default(broker_lite_server: BrokerLiteServer,
                                             tmp_path: Path) -> None:
    env = example_env(SHOP_BROKER=broker_lite_server.native)
    _exercise(env, tmp_path, f"sqlite:///{tmp_path / 'var' / 'inventory.sqlite'}")
    assert not list(tmp_path.glob("*.sqlite"))  # the files live in var/


@pytest.mark.timeout(300)
def test_django_shop_on_postgres_and_redis(postgres_server: PostgresServer, redis_url: str,
                                           tmp_path: Path) -> None:
    with postgres_and_redis(postgres_server, redis_url, tmp_path, "django") as (
            env, _shop_url, inventory_url):
        _exercise(env, tmp_path, inventory_url)


def _admin_login(address: str, password: str) -> str:
    """Log in to the admin as a browser does (CSRF cookie and token); the page reached."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(CookieJar()))
    with opener.open(f"http://{address}/admin/login/?next=/admin/", timeout=60) as page:
        form = page.read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    assert token, form[:2000]
    data = urllib.parse.urlencode({"csrfmiddlewaretoken": token.group(1), "username": "admin",
                                   "password": password, "next": "/admin/"}).encode()
    with opener.open(f"http://{address}/admin/login/?next=/admin/", data, timeout=60) as page:
        return str(page.geturl())


@pytest.mark.timeout(300)
def test_admin_logins_and_orders_race_the_relay_on_sqlite(
        broker_lite_server: BrokerLiteServer, tmp_path: Path) -> None:
    """Each login reads, then writes (session, last_login) under ATOMIC_REQUESTS while the
    relay sweeps every second and relays every order: no request may fail with
    ``database is locked``."""
    password = "race-the-relay"
    env = example_env(SHOP_BROKER=broker_lite_server.native,
                      DJANGO_SUPERUSER_PASSWORD=password)
    run([*MANAGE, "migrate", "--verbosity", "0"], env, tmp_path)
    run([*MANAGE, "createsuperuser", "--noinput", "--username", "admin", "--email",
         "admin@example.com"], env, tmp_path)
    failures: list[str] = []
    with contextlib.ExitStack() as stack:
        relay = stack.enter_context(running("relay", [*MANAGE, "rocketbox_relay"], env,
                                            tmp_path, r"ready\."))
        web = stack.enter_context(running("web", [*MANAGE, "serve", "--port", "0"], env,
                                          tmp_path, r"shop ready http://\S+"))
        address = web.wait_for(r"shop ready http://(\S+)", READY_TIMEOUT).group(1)
        refs: list[str] = []

        def logins() -> None:
            for _ in range(12):
                try:
                    landed = _admin_login(address, password)
                except Exception as exc:  # an HTTP 500 raises here
                    failures.append(f"login: {exc!r}")
                    continue
                if not landed.endswith("/admin/"):
                    failures.append(f"login landed on {landed}")

        def orders() -> None:
            for i in range(40):
                status, body = _post(address, {"item": "tea", "qty": 1 + i % 3})
                if status == 201:
                    refs.append(body["ref"])
                else:
                    failures.append(f"order: {status} {body}")

        threads = [threading.Thread(target=logins) for _ in range(2)]
        threads.append(threading.Thread(target=orders))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
        assert failures == [], f"{failures[:5]}\n{web.output()[-3000:]}"
        shop = create_engine(f"sqlite:///{tmp_path / 'var' / 'shop.sqlite'}")
        try:
            def unrelayed() -> int:
                with shop.connect() as conn:
                    return int(conn.execute(text(
                        "SELECT count(*) FROM rocketbox_transaction "
                        "WHERE relayed_at IS NULL")).scalar_one())
            wait_until(lambda: unrelayed() == 0, timeout=60,
                       message=lambda: f"{unrelayed()} unrelayed\n{relay.output()[-3000:]}")
        finally:
            shop.dispose()
        assert len(refs) == 40
        for log in (web.output(), relay.output()):
            assert "database is locked" not in log
