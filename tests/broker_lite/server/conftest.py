"""Server fixtures: real ``broker-lite serve`` processes on free loopback ports."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from server_wire import HealthyClient
from support import BrokerLiteServer, start_broker_lite

from broker_lite.cli import build_parser

# Until ``serve`` is registered in broker_lite/cli/__init__.py, run it through a
# parser that has only this command; the arguments are the same.
_LOCAL_SERVE = (
    "import argparse, sys\n"
    "from broker_lite.cli import serve\n"
    "parser = argparse.ArgumentParser(prog='broker-lite')\n"
    "serve.register(parser.add_subparsers(dest='command'))\n"
    "args = parser.parse_args()\n"
    "sys.exit(args.handler(args))\n"
)


def serve_registered() -> bool:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        build_parser().parse_args(["serve", "--data-dir", "x"])
        return True
    return False


def serve_command() -> list[str]:
    """The ``broker-lite`` command, as argv (``serve ...`` is appended)."""
    if serve_registered():
        return [sys.executable, "-m", "broker_lite"]
    return [sys.executable, "-c", _LOCAL_SERVE]


StartBroker = Callable[..., contextlib.AbstractContextManager[BrokerLiteServer]]


@pytest.fixture
def start_broker(tmp_path: Path) -> StartBroker:
    """``start_broker(*extra_args, data_dir=None)``: a context manager running a broker."""

    def _start(*extra: str, data_dir: Path | None = None
               ) -> contextlib.AbstractContextManager[BrokerLiteServer]:
        return start_broker_lite(data_dir or tmp_path / "broker", list(extra),
                                 command=serve_command())

    return _start


@pytest.fixture
def broker(start_broker: StartBroker) -> Iterator[BrokerLiteServer]:
    """A fresh broker per test, with default settings."""
    with start_broker() as server:
        yield server


@pytest.fixture
def healthy(broker: BrokerLiteServer) -> Iterator[HealthyClient]:
    """A client that keeps talking to ``broker`` on its own connection."""
    client = HealthyClient(broker.native)
    client.start()
    yield client
    client.stop()


def run_args(args: Sequence[str]) -> list[str]:
    return [*serve_command(), "serve", *args]
