"""Storage fixtures: stores on tiny files in ``tmp_path``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_lite.storage import MessageStore
from tests.broker_lite.storage.storage_support import Opener, tiny_config


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Opener]:
    """Open (and later close) stores on ``tmp_path / "store"`` with tiny files."""
    opened: list[MessageStore] = []

    def _open(**overrides: Any) -> MessageStore:
        store = MessageStore(tiny_config(tmp_path / "store", **overrides))
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
