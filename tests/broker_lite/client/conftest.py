"""Client fixtures: a real ``broker-lite serve`` per test, tuned so that waits are short.

``broker`` runs with ``--delay-time-scale 0.01`` (a 10 s retry delay takes
0.1 s), ``--tx-timeout 1`` and ``--tx-check-interval 0.5`` (an unresolved half
is checked back after about a second).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_lite.client.client_support import FAST_BROKER, StartBroker
from tests.support import BrokerLiteServer, broker_starter


@pytest.fixture
def start_broker(tmp_path: Path) -> StartBroker:
    """``start_broker(*extra_args, data_dir=None)``: a context manager running a broker."""
    return broker_starter(tmp_path, FAST_BROKER)


@pytest.fixture
def broker(start_broker: StartBroker) -> Iterator[BrokerLiteServer]:
    with start_broker() as server:
        yield server
