"""Server fixtures: real ``broker-lite serve`` processes on free loopback ports."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from server_wire import HealthyClient
from support import BrokerLiteServer, start_broker_lite


def serve_command() -> list[str]:
    """The ``broker-lite`` command, as argv (``serve ...`` is appended)."""
    return [sys.executable, "-m", "broker_lite"]


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
