"""Helpers for the relay tests: outbox databases, broker records, a collecting consumer."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, select, text
from support import PostgresServer, wait_until
from support.commitlog import broker_records as broker_records  # re-exported
from support.commitlog import commit_counts as commit_counts  # re-exported

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
