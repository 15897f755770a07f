"""Helpers for the relay tests: outbox databases, broker records, a collecting consumer."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry
from support import PostgresServer, wait_until

from broker_lite.client import ConsumeResult, PushConsumer, ReceivedMessage
from outbox.models import metadata
from outbox.models import transaction_table as t

FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3")


def pg_outbox_engine(server: PostgresServer) -> Engine:
    """A fresh database with the outbox tables and sequence."""
    db = server.create_database(f"rb_{uuid.uuid4().hex[:12]}")
    engine = create_engine(db.url, pool_size=10, max_overflow=20)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE SEQUENCE IF NOT EXISTS rocketbox_transaction_seq"))
    return engine


def sqlite_outbox_engine(path: Path) -> Engine:
    """A SQLite file with the outbox tables, and real BEGIN/SAVEPOINT (SQLAlchemy's recipe)."""
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_conn: DBAPIConnection, _entry: ConnectionPoolEntry
                                ) -> None:
        dbapi_conn.isolation_level = None  # type: ignore[attr-defined]

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    metadata.create_all(engine)
    return engine


def broker_records(data_dir: Path) -> list[dict[str, Any]]:
    """Every commit-log record (``broker-lite inspect``), half and op records included."""
    out = subprocess.run([sys.executable, "-m", "broker_lite", "inspect", "--data-dir",
                          str(data_dir)], capture_output=True, text=True, timeout=60,
                         check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def commit_counts(records: list[dict[str, Any]]) -> collections.Counter[str]:
    """How many commit records each transaction id has in the broker."""
    return collections.Counter(r["transaction_id"] for r in records if r["sysflag"] == "commit")


def records_of(records: list[dict[str, Any]], tx_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("transaction_id") == tx_id]


def relayed_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id).where(t.c.relayed_at.is_not(None))).scalars())


def all_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id)).scalars())


class Collector:
    """A push consumer that records what it receives (dedupe key, body, topic)."""

    def __init__(self, server: str, topic: str, group: str, **options: Any) -> None:
        self.messages: list[ReceivedMessage] = []
        self._lock = threading.Lock()
        self.consumer = PushConsumer(group, server, listener=self._on_message,
                                     rebalance_interval=0.5, **options)
        self.consumer.subscribe(topic)

    def _on_message(self, msg: ReceivedMessage) -> ConsumeResult:
        with self._lock:
            self.messages.append(msg)
        return ConsumeResult.SUCCESS

    @property
    def keys(self) -> list[str]:
        with self._lock:
            return [m.dedupe_key for m in self.messages]

    def wait_for(self, expected: set[str], timeout: float = 20.0) -> None:
        wait_until(lambda: expected <= set(self.keys), timeout=timeout,
                   message=lambda: f"received {sorted(self.keys)}, expected {sorted(expected)}")

    def __enter__(self) -> Collector:
        self.consumer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.shutdown()


def iter_commit_order(records: list[dict[str, Any]], tx_ids: list[str]) -> Iterator[str]:
    """The given transactions in the order their commit records were written."""
    wanted = set(tx_ids)
    for r in records:
        if r["sysflag"] == "commit" and r["transaction_id"] in wanted:
            yield r["transaction_id"]
