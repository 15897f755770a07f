"""Server fixtures: real ``broker-lite serve`` processes on free loopback ports."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_wire import HealthyClient, StartBroker, serve_command
from support import BrokerLiteServer, start_broker_lite


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
