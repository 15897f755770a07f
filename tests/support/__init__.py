"""Test support: real servers on free loopback ports, and polling with deadlines.

``tests/`` has no ``__init__.py``, so pytest puts ``tests/`` itself on
``sys.path`` when it loads ``tests/conftest.py``; import these helpers as
``from support import ...`` (or from one of its modules).
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
