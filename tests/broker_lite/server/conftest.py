"""Server fixtures: real ``broker-lite serve`` processes on free loopback ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_lite.server.server_wire import HealthyClient, StartBroker, serve_command
from tests.support import BrokerLiteServer, broker_starter


@pytest.fixture
def start_broker(tmp_path: Path) -> StartBroker:
    """``start_broker(*extra_args, data_dir=None)``: a context manager running a broker."""
    return broker_starter(tmp_path, command=serve_command())


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
