"""RabbitMQ target fixtures: an outbox database on PostgreSQL, a queue of its own per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from outbox import Outbox
from tests.support import PostgresServer
from tests.support.outbox_db import pg_outbox_database
from tests.support.rabbitmq_server import RabbitMQServer
from tests.targets.rabbitmq.rabbit_support import PROCESSED_SQL, declare


@pytest.fixture
def pg_engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    with pg_outbox_database(postgres_server, "rabbit", extra_sql=(PROCESSED_SQL,),
                            pool_size=5) as (engine, _):
        yield engine


@pytest.fixture
def queue(rabbitmq_server: RabbitMQServer) -> str:
    """A fresh durable quorum queue (the row's topic is its name)."""
    name = f"Orders{uuid.uuid4().hex[:8]}"
    declare(rabbitmq_server.url, name, "quorum")
    return name


@pytest.fixture
def outbox(pg_engine: Engine, rabbitmq_server: RabbitMQServer) -> Outbox:
    return Outbox(engine=pg_engine, broker=rabbitmq_server.url)
