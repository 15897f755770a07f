"""Check-back test fixtures: a PostgreSQL outbox database and a fast broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from checker_support import FAST_BROKER, pg_outbox_engine
from sqlalchemy import Engine
from support import BrokerLiteServer, PostgresServer, start_broker_lite


@pytest.fixture
def pg_db(postgres_server: PostgresServer) -> Iterator[tuple[Engine, str]]:
    engine, url = pg_outbox_engine(postgres_server)
    yield engine, url
    engine.dispose()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server
