"""The relay on SQLite (the embedded setup) against a real broker_lite."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings, publish
from outbox.errors import ConfigurationError
from outbox.models import transaction_table as t
from outbox.targets import HalfOutcome, OutgoingMessage, Publisher
from tests.outbox.relay.outbox_relay_support import (
    Collector,
    all_ids,
    broker_records,
    commit_counts,
    fast_relay,
    iter_commit_order,
    race_relays,
    records_of,
    relayed_ids,
)
from tests.support import BrokerLiteServer
from tests.support.publishers import PassThrough, drain

FAST = fast_relay(batch_size=5, broker_timeout=2.0)


@pytest.mark.timeout(60)
def test_sqlite_commit_rollback_and_savepoint(sqlite_engine: Engine,
                                              broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=sqlite_engine, broker=broker.native, relay=FAST)
    with Session(sqlite_engine) as session, session.begin():
        kept = publish(session, "Lite", {"n": 1}, outbox=outbox, message_group="g")
        with session.begin_nested() as savepoint:
            dropped = publish(session, "Lite", {"n": 2}, outbox=outbox, message_group="g")
            savepoint.rollback()
        kept2 = publish(session, "Lite", {"n": 3}, outbox=outbox, message_group="g")
    with Session(sqlite_engine) as session, session.begin() as tx:
        rolled_back = publish(session, "Lite", {"n": 4}, outbox=outbox)
        tx.rollback()
    assert all_ids(sqlite_engine) == {kept, kept2}

    drain(outbox)
    with Collector(broker.native, "Lite", "lite-group", orderly=True) as group:
        group.wait_for({kept, kept2})
        assert group.keys() == [kept, kept2]
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {kept: 1, kept2: 1}
    assert records_of(records, dropped) == [] and records_of(records, rolled_back) == []


@pytest.mark.timeout(60)
def test_broker_lite_halves_are_kept_by_offset_and_write_no_half_ids(
        sqlite_engine: Engine, broker: BrokerLiteServer) -> None:
    """The half-id write before the end is RocketMQ's (docs/rocketmq.md): on broker_lite,
    whose halves are named by offsets and de-duplicated by tx_id, the row keeps the offset
    written with its outcome and no ids (the extra write cost a fifth of the relay's time)."""
    outbox = Outbox(engine=sqlite_engine, broker=broker.native, relay=FAST)
    with Session(sqlite_engine) as session, session.begin():
        ids = [publish(session, "Lite", {"n": n}, outbox=outbox) for n in range(3)]
    drain(outbox)
    with sqlite_engine.connect() as conn:
        rows = conn.execute(select(t.c.tx_id, t.c.relayed_at, t.c.half_offset,
                                   t.c.half_message_id, t.c.half_transaction_id)
                            .where(t.c.tx_id.in_(ids))).all()
    assert len(rows) == 3
    for row in rows:
        assert row.relayed_at is not None and row.half_offset is not None, row
        assert row.half_message_id is None and row.half_transaction_id is None, row


@pytest.mark.timeout(90)
def test_sqlite_racing_relays_never_commit_twice(sqlite_engine: Engine,
                                                 broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=sqlite_engine, broker=broker.native, relay=FAST)
    ordered: list[str] = []
    for i in range(30):
        with Session(sqlite_engine) as session, session.begin():
            ordered.append(publish(session, "LiteRace", {"i": i}, outbox=outbox,
                                   message_group="g"))
            publish(session, "LiteRace", {"i": i}, outbox=outbox)
    expected = all_ids(sqlite_engine)
    race_relays(sqlite_engine, outbox, expected, 3, "lite", Relay.run_once, timeout=60)
    records = broker_records(broker.data_dir)
    counts = commit_counts(records)
    assert set(counts) == expected and set(counts.values()) == {1}
    assert list(iter_commit_order(records, ordered)) == ordered


class ThreadNoting(PassThrough):
    """A publisher that notes which thread sent each batch of halves."""

    def __init__(self, inner: Publisher) -> None:
        super().__init__(inner)
        self.threads: set[str] = set()

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        self.threads.add(threading.current_thread().name)
        return self.inner.send_halves(messages)


@pytest.mark.timeout(60)
def test_sqlite_drain_runs_one_lane_whatever_drain_lanes_says(
        sqlite_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=sqlite_engine, broker=broker.native,
                    relay=dataclasses.replace(FAST, drain_lanes=4))
    with Session(sqlite_engine) as session, session.begin():
        for i in range(23):
            publish(session, "OneLane", {"i": i}, outbox=outbox)
    publisher = ThreadNoting(BrokerLitePublisher(outbox))
    report = drain(outbox, publisher)
    assert report.relayed == 23 and relayed_ids(sqlite_engine) == all_ids(sqlite_engine)
    assert publisher.threads == {threading.current_thread().name}


def test_drain_lanes_below_one_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="drain_lanes must be >= 1"):
        RelaySettings(drain_lanes=0)
