"""Integration test fixtures: a fast broker and a migrated SQLite database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from outbox import migrate
from tests.integrations.integrations_support import FAST_BROKER
from tests.support import BrokerLiteServer, start_broker_lite


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite file with the outbox tables (through the Alembic migrations)."""
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    migrate.upgrade(url)
    return url
