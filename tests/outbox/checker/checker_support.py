"""Helpers for the check-back and half-first tests."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, text
from support import PostgresServer
from support.commitlog import broker_records as broker_records  # re-exported
from support.commitlog import commit_counts as commit_counts  # re-exported

from outbox.models import metadata

#: checks come fast; a half still UNKNOWN is never discarded for its check count (at
#: 0.3 s a check, RocketMQ's 15 would discard a slow test's half within seconds)
FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3", "--tx-check-max", "100000")
HERE = Path(__file__).resolve().parent


def pg_outbox_engine(server: PostgresServer) -> tuple[Engine, str]:
    """A fresh database with the outbox tables and an ``orders`` business table."""
    db = server.create_database(f"rbk_{uuid.uuid4().hex[:12]}")
    engine = create_engine(db.url)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE SEQUENCE IF NOT EXISTS rocketbox_transaction_seq"))
        conn.execute(text("CREATE TABLE orders (id text PRIMARY KEY, "
                          "ref text UNIQUE DEFERRABLE INITIALLY DEFERRED)"))
    return engine, db.url




def resolution(records: list[dict[str, Any]], tx_id: str) -> str | None:
    """How the broker resolved ``tx_id`` (its op record's TX_STATE), if it did."""
    for r in records:
        if r["transaction_id"] == tx_id and r["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            state = r["properties"].get("TX_STATE")
            if state in ("COMMIT", "ROLLBACK"):
                return str(state)
    return None
