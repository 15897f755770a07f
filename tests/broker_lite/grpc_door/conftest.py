"""gRPC door fixtures: a real ``broker-lite serve`` per test, reached by the official client.

``grpc_broker`` runs with :data:`grpc_support.FAST_GRPC_BROKER` and checks its log
for tracebacks afterwards; ``start_grpc_broker`` starts one with extra flags (an ACL,
a data dir to restart on).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_lite.grpc_door.grpc_support import FAST_GRPC_BROKER, StartGrpcBroker
from tests.support import BrokerLiteServer, broker_starter


@pytest.fixture
def start_grpc_broker(tmp_path: Path) -> StartGrpcBroker:
    """``start_grpc_broker(*extra_args, data_dir=None)``: a context manager running a broker."""
    return broker_starter(tmp_path, FAST_GRPC_BROKER)


@pytest.fixture
def grpc_broker(start_grpc_broker: StartGrpcBroker) -> Iterator[BrokerLiteServer]:
    """A fresh broker; after the test its log must hold no traceback (no unexpected error)."""
    with start_grpc_broker() as server:
        yield server
        log = server.stderr_text()
    assert "Traceback" not in log, log[-4000:]
