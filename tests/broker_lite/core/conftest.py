"""Core fixtures: a real Broker on a real store in ``tmp_path``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_lite.core import Broker
from tests.broker_lite.core.core_support import Opener, make_broker


@pytest.fixture
def open_broker(tmp_path: Path) -> Iterator[Opener]:
    opened: list[Broker] = []

    def _open(**overrides: Any) -> Broker:
        broker = make_broker(tmp_path / "broker", **overrides)
        opened.append(broker)
        return broker

    yield _open
    for broker in opened:
        broker.close()
