"""Relay test fixtures: an outbox database (PostgreSQL or SQLite) and a fast broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from tests.outbox.relay.outbox_relay_support import FAST_BROKER
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite
from tests.support.outbox_db import pg_outbox_database
from tests.support.sqlite import sqlite_outbox_engine


@pytest.fixture
def pg_engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    with pg_outbox_database(postgres_server, "rb", pool_size=10, max_overflow=20) as (engine, _):
        yield engine


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    engine = sqlite_outbox_engine(tmp_path / "outbox.sqlite")
    yield engine
    engine.dispose()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server
