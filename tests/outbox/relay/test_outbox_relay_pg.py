"""The relay on PostgreSQL against a real broker_lite: the invariant, order, parking, races."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from outbox import (
    BrokerLitePublisher,
    Outbox,
    Relay,
    RelayError,
    RelayReport,
    RelaySettings,
    publish,
)
from outbox.models import transaction_table as t
from outbox.targets import HalfOutcome, OutgoingMessage, Publisher
from tests.outbox.relay.outbox_relay_support import (
    FAST_BROKER,
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
from tests.support import BrokerLiteServer, free_port, start_broker_lite, wait_until
from tests.support.publishers import AfterHalves, PassThrough, drain

FAST = fast_relay()


def make_outbox(engine: Engine, broker: str, relay: RelaySettings = FAST) -> Outbox:
    return Outbox(engine=engine, broker=broker, relay=relay)


@pytest.mark.timeout(60)
def test_commit_gives_one_message_per_unit_rollback_and_savepoint_give_none(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = make_outbox(pg_engine, broker.native)
    with Session(pg_engine) as session, session.begin():
        first = publish(session, "Orders", {"n": 1}, outbox=outbox, tag="created")
        with session.begin_nested() as savepoint:
            dropped = publish(session, "Orders", {"n": "dropped"}, outbox=outbox)
            savepoint.rollback()
        second = publish(session, "Orders", {"n": 2}, outbox=outbox, keys=["k1", "k2"],
                         headers={"trace": "t-1", "n": 7})
    with Session(pg_engine) as session, session.begin() as tx:
        rolled_back = publish(session, "Orders", {"n": "never"}, outbox=outbox)
        tx.rollback()
    assert all_ids(pg_engine) == {first, second}

    drain(outbox)

    with Collector(broker.native, "Orders", "billing") as billing, \
            Collector(broker.native, "Orders", "shipping") as shipping:
        billing.wait_for({first, second})
        shipping.wait_for({first, second})
        assert sorted(billing.keys()) == sorted([first, second])
        assert sorted(shipping.keys()) == sorted([first, second])
        by_key = {m.dedupe_key: m for m in billing.messages}
        assert by_key[first].body == b'{"n":1}' and by_key[first].tags == "created"
        assert by_key[second].keys == ("k1", "k2")
        assert by_key[second].properties["trace"] == "t-1"
        assert by_key[second].properties["n"] == "7"
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {first: 1, second: 1}
    assert records_of(records, dropped) == [] and records_of(records, rolled_back) == []
    assert relayed_ids(pg_engine) == {first, second}
    with pg_engine.connect() as conn:  # JSON, not a JSON-encoded string
        assert conn.execute(select(t.c.headers).where(t.c.tx_id == second)).scalar_one() \
            == {"trace": "t-1", "n": 7}


def _publish_one(outbox: Outbox, body: object, group: str | None) -> str:
    with Session(outbox.engine) as session, session.begin():
        return publish(session, "Ordered", body, outbox=outbox, message_group=group)


def _publish_grouped(outbox: Outbox, topic: str, *, units: int, groups: int,
                     loose: int) -> dict[str, list[str]]:
    """``units`` units of work, each with one message for every group ``g0``, ``g1``, ... and
    ``loose`` without a group; each group's ids in commit order."""
    ids: dict[str, list[str]] = {f"g{g}": [] for g in range(groups)}
    for i in range(units):
        with Session(outbox.engine) as session, session.begin():
            for g, group_ids in ids.items():
                group_ids.append(publish(session, topic, {"i": i, "g": g}, outbox=outbox,
                                         message_group=g))
            for _ in range(loose):
                publish(session, topic, {"i": i}, outbox=outbox)
    return ids


@pytest.mark.timeout(60)
@pytest.mark.parametrize("broker_extra", [("--max-message-size", "16K")])
def test_group_order_holds_and_a_poisoned_group_parks_alone(
        pg_engine: Engine, tmp_path: Path, broker_extra: Sequence[str]) -> None:
    with start_broker_lite(tmp_path / "b", [*FAST_BROKER, *broker_extra]) as broker:
        outbox = Outbox(engine=pg_engine, broker=broker.native,
                        relay=RelaySettings(batch_size=4, max_attempts=2, backoff_base=0.01,
                                            backoff_max=0.02, jitter=0.0, broker_timeout=1.0))
        ids: dict[str, list[str]] = {"a": [], "b": [], "u": []}
        for i in range(6):  # interleaved commits of three streams
            ids["a"].append(_publish_one(outbox, {"a": i}, "group-a"))
            ids["b"].append(_publish_one(outbox, "x" * 20_000 if i == 2 else {"b": i},
                                         "group-b"))
            ids["u"].append(_publish_one(outbox, {"u": i}, None))
        poison = ids["b"][2]

        publisher = BrokerLitePublisher(outbox)
        relay = Relay(outbox, publisher)
        try:
            def settled() -> bool:
                relay.run_once()
                with pg_engine.connect() as conn:
                    return bool(conn.execute(select(t.c.parked).where(t.c.tx_id == poison))
                                .scalar())
            wait_until(settled, timeout=20, message="the poisoned row was not parked")
            relay.drain()
        finally:
            publisher.close()

        with pg_engine.connect() as conn:
            row = conn.execute(select(t.c.attempts, t.c.last_error)
                               .where(t.c.tx_id == poison)).one()
        assert row.attempts == 2 and "16384" in (row.last_error or "")
        assert relayed_ids(pg_engine) == set(ids["a"]) | set(ids["u"]) | set(ids["b"][:2])
        records = broker_records(broker.data_dir)
    assert set(commit_counts(records).values()) == {1}
    assert list(iter_commit_order(records, ids["a"])) == ids["a"]
    assert list(iter_commit_order(records, ids["b"])) == ids["b"][:2]
    assert records_of(records, poison) == []


@pytest.mark.timeout(90)
def test_racing_relays_never_commit_twice_and_keep_group_order(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = make_outbox(pg_engine, broker.native)
    groups = _publish_grouped(outbox, "Raced", units=40, groups=4, loose=1)
    expected = all_ids(pg_engine)
    small = make_outbox(pg_engine, broker.native, relay=RelaySettings(
        batch_size=7, lease_seconds=5, broker_timeout=2.0))
    race_relays(pg_engine, small, expected, 4, "racer", Relay.run_once, timeout=60)
    records = broker_records(broker.data_dir)
    counts = commit_counts(records)
    assert set(counts) == expected and set(counts.values()) == {1}
    for ids in groups.values():
        assert list(iter_commit_order(records, ids)) == ids


class StallingPublisher(PassThrough):
    """Sends the halves, then blocks until released (a relay that lost its lease)."""

    def __init__(self, inner: Publisher) -> None:
        super().__init__(inner)
        self.halves_sent = threading.Event()
        self.release = threading.Event()

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        result = self.inner.send_halves(messages)
        self.halves_sent.set()
        self.release.wait(30)
        return result


@pytest.mark.timeout(60)
def test_a_relay_whose_lease_expired_cannot_overwrite_the_new_owner(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = make_outbox(pg_engine, broker.native, relay=RelaySettings(
        lease_seconds=0.5, broker_timeout=2.0))
    with Session(pg_engine) as session, session.begin():
        ids = [publish(session, "Leased", {"i": i}, outbox=outbox) for i in range(5)]
    slow = StallingPublisher(BrokerLitePublisher(outbox))
    stalled = threading.Thread(target=lambda: Relay(outbox, slow, name="slow").run_once())
    stalled.start()
    try:
        assert slow.halves_sent.wait(10)
        fast_publisher = BrokerLitePublisher(outbox)
        try:
            wait_until(lambda: Relay(outbox, fast_publisher, name="fast").run_once().relayed,
                       timeout=10)
        finally:
            fast_publisher.close()
    finally:
        slow.release.set()
        stalled.join(20)
        slow.close()
    assert relayed_ids(pg_engine) == set(ids)
    with pg_engine.connect() as conn:
        assert set(conn.execute(select(t.c.claimed_by)).scalars()) == {None}
    counts = commit_counts(broker_records(broker.data_dir))
    assert counts == {tx: 1 for tx in ids}


@pytest.mark.timeout(90)
def test_broker_down_rows_wait_then_flow_without_loss_or_duplicate(
        pg_engine: Engine, tmp_path: Path) -> None:
    data_dir, port = tmp_path / "broker", free_port()
    args = [*FAST_BROKER, "--port", str(port)]
    address = f"127.0.0.1:{port}"
    outbox = make_outbox(pg_engine, address)
    with Session(pg_engine) as session, session.begin():
        early = [publish(session, "Down", {"i": i}, outbox=outbox, message_group="g")
                 for i in range(5)]
    with start_broker_lite(data_dir, args) as broker:
        # the halves are stored, then the broker crashes before the ends go out
        crashing = AfterHalves(BrokerLitePublisher(outbox), lambda _sent: broker.kill())
        try:
            with pytest.raises(RelayError):
                Relay(outbox, crashing).run_once()
        finally:
            crashing.close()
    # the broker is down: halves were stored, no end went out
    with Session(pg_engine) as session, session.begin():
        late = [publish(session, "Down", {"i": i}, outbox=outbox, message_group="g")
                for i in range(5, 10)]
    publisher = BrokerLitePublisher(outbox)
    try:
        for _ in range(3):
            with pytest.raises(RelayError):
                Relay(outbox, publisher).run_once()
        with pg_engine.connect() as conn:
            rows = conn.execute(select(t.c.tx_id, t.c.attempts, t.c.half_offset,
                                       t.c.claimed_by, t.c.parked)).all()
        assert {r.attempts for r in rows} == {0} and not any(r.parked for r in rows)
        assert {r.claimed_by for r in rows} == {None}
        assert all(r.half_offset is not None for r in rows if r.tx_id in early)
        assert relayed_ids(pg_engine) == set()

        with start_broker_lite(data_dir, args) as broker:
            wait_until(lambda: Relay(outbox, publisher).drain() and
                       relayed_ids(pg_engine) == set(early + late), timeout=30,
                       ignore=(RelayError,))
            with Collector(address, "Down", "audit", orderly=True) as audit:
                audit.wait_for(set(early + late))
                assert audit.keys() == early + late
    finally:
        publisher.close()
    counts = commit_counts(broker_records(data_dir))
    assert counts == {tx: 1 for tx in early + late}


@pytest.mark.timeout(120)
def test_drain_lanes_and_a_second_sweeper_never_commit_twice_and_keep_group_order(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = make_outbox(pg_engine, broker.native, relay=RelaySettings(
        batch_size=9, drain_lanes=4, lease_seconds=10, broker_timeout=2.0))
    groups = _publish_grouped(outbox, "Laned", units=30, groups=5, loose=3)
    expected = all_ids(pg_engine)
    reports: list[RelayReport] = []
    # two sweeps at once, four lanes each
    race_relays(pg_engine, outbox, expected, 2, "sweeper",
          lambda relay: reports.append(relay.drain(max_passes=10_000)), timeout=90)
    assert sum(r.relayed for r in reports) == len(expected)
    assert not any(r.failed for r in reports)
    records = broker_records(broker.data_dir)
    counts = commit_counts(records)
    assert set(counts) == expected and set(counts.values()) == {1}
    for ids in groups.values():
        assert list(iter_commit_order(records, ids)) == ids
    with pg_engine.connect() as conn:
        names = set(conn.execute(select(t.c.claimed_by)).scalars())
    assert names == {None}


@pytest.mark.timeout(60)
def test_a_retried_group_head_is_claimed_though_its_held_back_rows_fill_the_window(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    # Claims walk the pending index (oldest next_attempt_at first). A head that was
    # retried has a later next_attempt_at than every row of its group it held back,
    # so a window of batch_size rows can hold only those; the claim takes the head too.
    outbox = make_outbox(pg_engine, broker.native, relay=RelaySettings(
        batch_size=4, drain_lanes=1, broker_timeout=2.0))
    ids = [_publish_one(outbox, {"i": i}, "hot") for i in range(10)]
    loose = _publish_one(outbox, {"loose": 1}, None)
    with pg_engine.begin() as conn:  # the head failed once and came due again just now
        conn.execute(update(t).where(t.c.tx_id == ids[0]).values(
            attempts=1, next_attempt_at=datetime.now(UTC)))
    publisher = BrokerLitePublisher(outbox)
    try:
        relay = Relay(outbox, publisher)
        claimed = relay.claim()
        assert [r.tx_id for r in claimed] == ids[:4]  # the head, then its run; at most 4
        relay._release(claimed, {}, RuntimeError("test: give the claim back"))
        report = relay.drain()
    finally:
        publisher.close()
    assert report.relayed == 11 and relayed_ids(pg_engine) == {*ids, loose}
    records = broker_records(broker.data_dir)
    assert list(iter_commit_order(records, ids)) == ids
    assert set(commit_counts(records).values()) == {1}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("stuck", ["parked", "backing_off"])
def test_a_stuck_group_head_never_starves_the_rows_behind_its_group(
        pg_engine: Engine, broker: BrokerLiteServer, stuck: str) -> None:
    # Ten rows wait behind a head that cannot go; they are older than the other
    # rows, so a window of four would hold only them if they were not left out.
    outbox = make_outbox(pg_engine, broker.native, relay=RelaySettings(
        batch_size=4, drain_lanes=1, broker_timeout=2.0))
    stuck_group = [_publish_one(outbox, {"i": i}, "stuck") for i in range(11)]
    others = [_publish_one(outbox, {"o": i}, "other") for i in range(3)]
    loose = [_publish_one(outbox, {"l": i}, None) for i in range(5)]
    head = stuck_group[0]
    later = datetime.now(UTC) + timedelta(hours=1)
    with pg_engine.begin() as conn:
        conn.execute(update(t).where(t.c.tx_id == head).values(
            attempts=1, parked=stuck == "parked", last_error="test: poisoned",
            next_attempt_at=later if stuck == "backing_off" else datetime.now(UTC)))
    report = drain(outbox)
    assert relayed_ids(pg_engine) == {*others, *loose}
    assert report.relayed == len(others) + len(loose)
    records = broker_records(broker.data_dir)
    assert list(iter_commit_order(records, others)) == others
    assert all(records_of(records, tx) == [] for tx in stuck_group)
