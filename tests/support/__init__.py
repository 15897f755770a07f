"""Test support: real servers on free loopback ports, and polling with deadlines.

``tests/`` and every directory below it are packages, found from the
checkout's root (pytest's ``pythonpath``); import these helpers as
``from tests.support import ...`` (or from one of its modules), never as a
top-level ``support`` (see tests/README.md).
"""

from __future__ import annotations

from .broker_server import BrokerLiteServer, StartBroker, broker_starter, start_broker_lite
from .commitlog import broker_records, commit_counts
from .servers import (
    LOOPBACK,
    PostgresServer,
    RedisServer,
    ServerStartError,
    ServerUnavailable,
    find_postgres_bindir,
    free_port,
    start_postgres,
    start_redis,
)
from .waiting import WaitTimeout, wait_until

__all__ = [
    "LOOPBACK",
    "BrokerLiteServer",
    "PostgresServer",
    "RedisServer",
    "ServerStartError",
    "ServerUnavailable",
    "StartBroker",
    "WaitTimeout",
    "broker_records",
    "broker_starter",
    "commit_counts",
    "find_postgres_bindir",
    "free_port",
    "start_broker_lite",
    "start_postgres",
    "start_redis",
    "wait_until",
]
