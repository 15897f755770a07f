"""Run an example's parts as subprocesses, each in its own process group (procgroup).

:func:`start_shop` starts a shop's four parts the way its README does;
:func:`postgres_and_redis` gives the README's production setup (PostgreSQL,
Redis, a broker) as the environment the parts read.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from sqlalchemy import create_engine, text

from procgroup import Process
from tests.support import PostgresServer, start_broker_lite, wait_until
from tests.support.http import http as http  # re-exported for the tests

REPO = Path(__file__).resolve().parents[2]
FLASK = Path(sys.executable).with_name("flask")
READY_TIMEOUT = 60.0


def example_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOP_", "DJANGO_"))}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


@contextlib.contextmanager
def running(name: str, argv: Sequence[str], env: Mapping[str, str], tmp: Path,
            ready: str, timeout: float = READY_TIMEOUT) -> Iterator[Process]:
    """``argv`` in its own process group, logging to ``tmp/NAME.log``, ready once its log
    matches ``ready``; stopped (SIGTERM, then SIGKILL) on the way out."""
    with Process(argv, log=tmp / f"{name}.log", env=env, cwd=tmp, name=name) as part:
        part.start().wait_for(ready, timeout)
        yield part


def run(argv: Sequence[str], env: Mapping[str, str], tmp: Path) -> str:
    done = subprocess.run(list(argv), env=dict(env), cwd=tmp, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def start_shop(stack: contextlib.ExitStack, env: Mapping[str, str], tmp: Path, *,
               relay: Sequence[str], checker: Sequence[str], checker_ready: str,
               inventory: Sequence[str], web: Sequence[str]) -> tuple[Process, str]:
    """Start the relay, the checker, the inventory consumer and the web part (``web`` serves
    on port 0) on ``stack``; returns the relay (its log explains a slow wait) and the web
    part's HOST:PORT."""
    relay_part = stack.enter_context(running("relay", relay, env, tmp, r"ready\."))
    stack.enter_context(running("checker", checker, env, tmp, checker_ready))
    stack.enter_context(running("inventory", inventory, env, tmp, "inventory ready"))
    web_part = stack.enter_context(running("web", web, env, tmp, r"shop ready http://\S+"))
    address = web_part.wait_for(r"shop ready http://(\S+)", READY_TIMEOUT).group(1)
    return relay_part, address


@contextlib.contextmanager
def postgres_and_redis(postgres_server: PostgresServer, redis_url: str, tmp: Path,
                       name: str, *, asyncpg: bool = False
                       ) -> Iterator[tuple[dict[str, str], str, str]]:
    """Databases ``NAME_shop`` and ``NAME_inventory``, Celery on ``redis_url`` and a broker
    (1 s transaction timeout); yields the shop's environment, its database URL (asyncpg's if
    ``asyncpg``) and the inventory's."""
    shop = postgres_server.create_database(f"{name}_shop")
    inventory = postgres_server.create_database(f"{name}_inventory")
    shop_url = shop.url.replace("+psycopg:", "+asyncpg:") if asyncpg else shop.url
    with start_broker_lite(tmp / "broker", ("--tx-timeout", "1")) as broker:
        yield (example_env(SHOP_DB=shop_url, SHOP_INVENTORY_DB=inventory.url,
                           SHOP_CELERY_BROKER=redis_url, SHOP_BROKER=broker.native),
               shop_url, inventory.url)


def order_from_the_shop(address: str) -> list[str]:
    """The Flask and FastAPI shops' contract over HTTP: six orders (201), an unknown item
    (422) and too many of one (409) rolled back; returns the refs of the six."""
    created = []
    for i in range(6):
        status, body = http(address, "POST", "/orders", {"item": "tea", "qty": i + 1})
        assert status == 201, body
        created.append(body["ref"])
    assert http(address, "POST", "/orders", {"item": "unicorn", "ref": "bad-1"})[0] == 422
    assert http(address, "POST", "/orders", {"item": "tea", "qty": 50, "ref": "bad-2"})[0] \
        == 409
    assert http(address, "GET", "/orders/bad-1")[0] == 404
    return created


def wait_reserved(inventory_url: str, refs: Sequence[str], relay: Process,
                  ignore: tuple[type[BaseException], ...] = ()) -> None:
    """Wait until the inventory has reserved exactly the orders ``refs`` (``ignore``: errors
    that mean "not yet", e.g. a table the consumer has not created yet)."""
    inventory = create_engine(inventory_url)
    try:
        def reserved() -> list[str]:
            with inventory.connect() as conn:
                return sorted(conn.execute(text(
                    "SELECT order_ref FROM inventory_reservation")).scalars())
        wait_until(lambda: reserved() == sorted(refs), timeout=40, ignore=ignore,
                   message=lambda: f"reserved {reserved()}\n{relay.output()[-3000:]}")
    finally:
        inventory.dispose()
