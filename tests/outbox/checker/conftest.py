"""Check-back test fixtures: a PostgreSQL outbox database and a fast broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.outbox.checker.checker_support import FAST_BROKER, ORDERS_TABLE
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite
from tests.support.outbox_db import pg_outbox_database


@pytest.fixture
def pg_db(postgres_server: PostgresServer) -> Iterator[tuple[Engine, str]]:
    """``(engine, url)`` of a fresh outbox database with an ``orders`` table."""
    with pg_outbox_database(postgres_server, "rbk", extra_sql=(ORDERS_TABLE,)) as db:
        yield db


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server
