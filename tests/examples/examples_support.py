"""Run an example's parts as subprocesses, each in its own process group."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from support import wait_until
from support.http import http as http  # re-exported for the tests

REPO = Path(__file__).resolve().parents[2]
FLASK = Path(sys.executable).with_name("flask")


@dataclass
class Running:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        def seen() -> re.Match[str] | None:
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.process.returncode}:\n"
                                     f"{self.log()[-4000:]}")
            return re.search(pattern, self.log())
        return wait_until(seen, timeout=timeout, interval=0.05,
                          message=lambda: f"{self.name}:\n{self.log()[-4000:]}")

    def stop(self) -> int:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(15)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait(15)


def example_env(**settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHOP_", "DJANGO_"))}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(settings)
    return env


@contextlib.contextmanager
def running(name: str, argv: Sequence[str], env: Mapping[str, str], tmp: Path,
            ready: str) -> Iterator[Running]:
    log_path = tmp / f"{name}.log"
    with log_path.open("ab") as out:
        process = subprocess.Popen(list(argv), env=dict(env), cwd=tmp, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    part = Running(name, process, log_path)
    try:
        part.wait_for(ready)
        yield part
    finally:
        part.stop()


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


def wait_reserved(inventory_url: str, refs: Sequence[str], relay: Running) -> None:
    """Wait until the inventory has reserved exactly the orders ``refs``."""
    inventory = create_engine(inventory_url)
    try:
        def reserved() -> list[str]:
            with inventory.connect() as conn:
                return sorted(conn.execute(text(
                    "SELECT order_ref FROM inventory_reservation")).scalars())
        wait_until(lambda: reserved() == sorted(refs), timeout=40,
                   message=lambda: f"reserved {reserved()}\n{relay.log()[-3000:]}")
    finally:
        inventory.dispose()
