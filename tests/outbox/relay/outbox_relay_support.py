"""Helpers for the relay tests: outbox databases, fast settings, racing relays, broker
records, a collecting consumer."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import Engine, select

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings
from outbox.models import transaction_table as t
from tests.support.commitlog import broker_records as broker_records  # re-exported
from tests.support.commitlog import commit_counts as commit_counts  # re-exported
from tests.support.recorder import Collector as Collector  # re-exported

FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3")


def fast_relay(**changes: Any) -> RelaySettings:
    """Relay settings that retry fast and give up after three attempts; ``changes`` win."""
    return RelaySettings(**{"batch_size": 50, "lease_seconds": 5, "max_attempts": 3,
                            "backoff_base": 0.01, "backoff_max": 0.05, "jitter": 0.0,
                            "broker_timeout": 1.0, **changes})


def race_relays(engine: Engine, outbox: Outbox, expected: set[str], threads: int, name: str,
                step: Callable[[Relay], object], *, timeout: float) -> None:
    """``threads`` relays (own publisher each) call ``step`` until every row is relayed."""
    errors: list[BaseException] = []

    def racer() -> None:
        publisher = BrokerLitePublisher(outbox)
        relay = Relay(outbox, publisher, name=f"{name}-{threading.get_ident()}")
        try:
            while relayed_ids(engine) != expected:
                step(relay)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            publisher.close()

    racers = [threading.Thread(target=racer) for _ in range(threads)]
    for thread in racers:
        thread.start()
    for thread in racers:
        thread.join(timeout)
    assert not errors


def records_of(records: list[dict[str, Any]], tx_id: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("transaction_id") == tx_id]


def relayed_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id).where(t.c.relayed_at.is_not(None))).scalars())


def all_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id)).scalars())


def iter_commit_order(records: list[dict[str, Any]], tx_ids: list[str]) -> Iterator[str]:
    """The given transactions in the order their commit records were written."""
    wanted = set(tx_ids)
    for r in records:
        if r["sysflag"] == "commit" and r["transaction_id"] in wanted:
            yield r["transaction_id"]
