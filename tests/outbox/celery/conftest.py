"""Celery test fixtures: a PostgreSQL outbox database, a fast broker, and the ``stack`` a
worker test starts from (that database, a Redis database of the test's own, its folder)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine

from tests.outbox.celery.rocketbox_celery_support import FAST_BROKER, CeleryStack
from tests.support import BrokerLiteServer, PostgresServer, RedisServer, start_broker_lite
from tests.support.outbox_db import pg_outbox_database

# database 0 is the session's shared one (the ``redis_url`` fixture); the worker tests
# take 1-15 in turn, so a task left over in one test's queue never reaches another's worker
_REDIS_DBS = itertools.cycle(range(1, 16))


@pytest.fixture
def pg_db(postgres_server: PostgresServer) -> Iterator[tuple[Engine, str]]:
    """``(engine, url)`` of a fresh outbox database."""
    with pg_outbox_database(postgres_server, "rbc") as db:
        yield db


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server


@pytest.fixture
def stack(pg_db: tuple[Engine, str], redis_server: RedisServer, tmp_path: Path) -> CeleryStack:
    """A fresh outbox database and the next Redis database (emptied first) for Celery."""
    engine, url = pg_db
    own = dataclasses.replace(redis_server, db=next(_REDIS_DBS))
    with redis.Redis(host=own.host, port=own.port, db=own.db) as client:
        client.flushdb()
    return CeleryStack(engine=engine, db_url=url, redis=own, tmp=tmp_path)
