"""Helpers for the check-back and half-first tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.commitlog import broker_records as broker_records  # re-exported
from tests.support.commitlog import commit_counts as commit_counts  # re-exported

#: checks come fast; a half still UNKNOWN is never discarded for its check count (at
#: 0.3 s a check, RocketMQ's 15 would discard a slow test's half within seconds)
FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3", "--tx-check-max", "100000")
HERE = Path(__file__).resolve().parent


#: the business table the tests write beside the outbox row
ORDERS_TABLE = ("CREATE TABLE orders (id text PRIMARY KEY, "
                "ref text UNIQUE DEFERRABLE INITIALLY DEFERRED)")


def resolution(records: list[dict[str, Any]], tx_id: str) -> str | None:
    """How the broker resolved ``tx_id`` (its op record's TX_STATE), if it did."""
    for r in records:
        if r["transaction_id"] == tx_id and r["topic"] == "RMQ_SYS_TRANS_OP_HALF_TOPIC":
            state = r["properties"].get("TX_STATE")
            if state in ("COMMIT", "ROLLBACK"):
                return str(state)
    return None
