"""Run an example's parts as subprocesses, each in its own process group (procgroup)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from sqlalchemy import create_engine, text
from support import wait_until
from support.http import http as http  # re-exported for the tests

from procgroup import Process

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
