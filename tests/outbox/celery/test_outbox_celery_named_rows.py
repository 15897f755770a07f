"""The rows a wake-up names, relayed by the leading listener without a claim.

outbox/notified.py and ``NamedRows`` in outbox/celery/listen.py. Real
PostgreSQL and broker_lite; :class:`Listener` s run in this process. A
trigger on the status table notes every claim (``claimed_by`` set), so a
test sees which rows went through a claim and which did not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings
from outbox.celery import CelerySettings, celery_on_commit, make_celery, rocketbox_state
from outbox.celery.listen import APPLICATION_NAME, CHANNEL, LEADER_LOCK, Listener
from outbox.notified import (
    MAX_PAYLOAD,
    DueRows,
    parse_wake,
    read_due,
    wake_payload,
    wake_payloads,
)
from outbox.publish import publish
from outbox.targets import OutgoingMessage, Publisher
from outbox.targets.base import HalfThenEnd, TxState
from tests.outbox.celery.rocketbox_celery_support import (
    CeleryStack,
    broker_records,
    commit,
    commit_counts,
    relayed_ids,
)
from tests.support import BrokerLiteServer, free_port, wait_until
from tests.support.publishers import PassThrough

WAKE = CelerySettings(sweep_interval=0, listen=True)

_CLAIMS_SEEN = """
CREATE TABLE claims_seen (tx_id text NOT NULL, claimed_by text NOT NULL);
CREATE FUNCTION note_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO claims_seen VALUES (NEW.tx_id, NEW.claimed_by);
    RETURN NEW;
END $$;
CREATE TRIGGER note_claim BEFORE UPDATE ON rocketbox_transaction FOR EACH ROW
    WHEN (NEW.claimed_by IS NOT NULL AND NEW.claimed_by IS DISTINCT FROM OLD.claimed_by)
    EXECUTE FUNCTION note_claim();
"""


def claimed(engine: Engine) -> set[str]:
    """The rows some relay has claimed (the trigger's notes)."""
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT tx_id FROM claims_seen")).scalars())


def forget_claims(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM claims_seen"))


def warm_leader(engine: Engine, waking: Outbox, topic: str) -> list[str]:
    """Wait for the listener to lead, have it relay one row (the claiming passes of a new
    leader may take that one) and forget the claims seen so far; the row's id. With
    ``catch_up_seconds`` long, no claim follows unless a named row needs one."""
    wait_until(lambda: leaders(engine), timeout=20)
    first = commit(engine, waking, 1, topic)
    wait_until(lambda: relayed_ids(engine) == set(first), timeout=20)
    forget_claims(engine)
    return first


def libpq(engine: Engine) -> str:
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


def listeners(engine: Engine) -> list[int]:
    """The backends of listening connections."""
    with engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE application_name = :a"),
            {"a": APPLICATION_NAME}).scalars())


def leaders(engine: Engine) -> list[int]:
    """The backends of listening connections that hold the leader lock."""
    with engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE a.application_name = :a AND l.locktype = 'advisory' AND l.granted "
            "AND l.classid::bigint = :hi AND l.objid::bigint = :lo"),
            {"a": APPLICATION_NAME, "hi": LEADER_LOCK >> 32,
             "lo": LEADER_LOCK & 0xFFFFFFFF}).scalars())


class Counted(PassThrough):
    """A broker_lite publisher that counts the rows each of its calls sent; it keeps the
    target's round trip and its ``halves_deduplicated`` (``target``)."""

    def __init__(self, inner: BrokerLitePublisher) -> None:
        super().__init__(inner)
        self.target = inner.target
        self.sent: list[str] = []
        self._lock = threading.Lock()

    def send_and_end(self, messages: Sequence[OutgoingMessage], states: Sequence[TxState]
                     ) -> list[HalfThenEnd] | None:
        with self._lock:
            self.sent.extend(m.tx_id for m in messages)
        return self.inner.send_and_end(messages, states)  # type: ignore[attr-defined, no-any-return]

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[Any]:
        with self._lock:
            self.sent.extend(m.tx_id for m in messages)
        return self.inner.send_halves(messages)


@dataclasses.dataclass
class Running:
    listener: Listener
    publishers: list[Counted]
    fatal: list[str]

    def sent(self) -> list[str]:
        return [tx for p in self.publishers for tx in p.sent]


@pytest.fixture
def engine(stack: CeleryStack) -> Engine:
    with stack.engine.begin() as conn:
        conn.exec_driver_sql(_CLAIMS_SEEN)
    return stack.engine


@pytest.fixture
def waking(engine: Engine, broker: BrokerLiteServer) -> Outbox:
    """The web side: commits wake the listeners (no task can be enqueued)."""
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    outbox = Outbox(engine=engine, broker=broker.native)
    return dataclasses.replace(outbox, on_commit=celery_on_commit(
        make_celery(outbox, broker_url=dead_redis, settings=WAKE)))


@contextlib.contextmanager
def listening(engine: Engine, broker: BrokerLiteServer, **options: Any) -> Iterator[Running]:
    """A :class:`Listener` on a Counted broker_lite publisher (``options``: the listener's)."""
    outbox = Outbox(engine=engine, broker=broker.native, relay=RelaySettings(broker_timeout=2.0))
    publishers: list[Counted] = []

    def make(o: Outbox) -> Publisher:
        publishers.append(Counted(BrokerLitePublisher(o)))
        return publishers[-1]

    state = rocketbox_state(make_celery(outbox, broker_url=f"redis://127.0.0.1:{free_port()}/0",
                                        settings=WAKE, publisher_factory=make))
    fatal: list[str] = []
    listener = Listener(state, on_fatal=fatal.append, wait_seconds=0.1, **options)
    listener.start()
    try:
        yield Running(listener, publishers, fatal)
    finally:
        listener.stop()
        state.close()


@pytest.mark.timeout(120)
def test_the_leader_relays_the_rows_a_wake_up_names_without_claiming_them(
        engine: Engine, broker: BrokerLiteServer, waking: Outbox) -> None:
    with listening(engine, broker, catch_up_seconds=600) as run:
        first = warm_leader(engine, waking, "Named")
        named = commit(engine, waking, 5, "Named")
        wait_until(lambda: relayed_ids(engine) == {*first, *named}, timeout=20,
                   message=lambda: f"relayed {relayed_ids(engine)}")
    assert run.fatal == []
    assert claimed(engine) == set()  # no row was claimed
    assert sorted(run.sent()) == sorted([*first, *named])
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in [*first, *named]}
    with engine.connect() as conn:
        recorded = conn.execute(text(
            "SELECT count(*) FROM rocketbox_transaction WHERE relayed_at IS NOT NULL "
            "AND half_offset IS NOT NULL AND commit_offset IS NOT NULL "
            "AND claimed_by IS NULL AND claimed_until IS NULL")).scalar()
    assert recorded == 6


@pytest.mark.timeout(120)
def test_a_forged_wake_up_relays_nothing_the_status_table_does_not_say_is_due(
        engine: Engine, broker: BrokerLiteServer, waking: Outbox, stack: CeleryStack) -> None:
    intruder = intruder_url(engine)
    with listening(engine, broker, catch_up_seconds=600) as run:
        wait_until(lambda: leaders(engine), timeout=20)
        done = commit(engine, waking, 1, "Forged")  # relayed once already
        wait_until(lambda: relayed_ids(engine) == set(done), timeout=20)
        parked = commit(engine, Outbox(engine=engine, broker=broker.native), 1, "Forged")
        with engine.begin() as conn:
            conn.execute(text("UPDATE rocketbox_transaction SET parked = true "
                              "WHERE tx_id = :t"), {"t": parked[0]})
        with Session(engine) as open_session:
            open_session.begin()
            # its INSERT notifies as every row does: delivered with the commit, not before
            pending = publish(open_session, "Forged", {"open": True}, outbox=waking)
            open_session.flush()
            with psycopg.connect(intruder, autocommit=True) as forger:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    forger.execute("SELECT tx_id FROM rocketbox_transaction")
                # names: read by the leader (and found not due); the owner's wake-up
                # comes after them, so once its row is relayed they were taken
                for payload in [["NOT-A-ROW"], [pending], done, parked]:
                    forger.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(payload)))
                owner = commit(engine, waking, 1, "Forged")
                wait_until(lambda: relayed_ids(engine) == {*done, *owner}, timeout=20,
                           message=lambda: f"relayed {relayed_ids(engine)}")
                # payloads that name no row (claiming passes), and more names than a pass
                for text_payload in ["not json", json.dumps({"tx_id": pending}),
                                     json.dumps([1, 2]),
                                     json.dumps([f"X{n}" for n in range(600)])]:
                    forger.execute("SELECT pg_notify(%s, %s)", (CHANNEL, text_payload))
                owner += commit(engine, waking, 1, "Forged")
                wait_until(lambda: relayed_ids(engine) == {*done, *owner}, timeout=20,
                           message=lambda: f"relayed {relayed_ids(engine)}")
            records = broker_records(broker.data_dir)
            assert pending not in {r.get("transaction_id") for r in records}
            open_session.commit()
        wait_until(lambda: relayed_ids(engine) == {*done, *owner, pending}, timeout=20)
    assert run.fatal == []
    # nothing was sent for a name the status table did not hold as due
    assert sorted(run.sent()) == sorted([*done, *owner, pending])
    assert commit_counts(broker_records(broker.data_dir)) == {
        tx: 1 for tx in [*done, *owner, pending]}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT parked, relayed_at FROM rocketbox_transaction "
                                 "WHERE tx_id = :t"), {"t": parked[0]}).one() == (True, None)
    assert leaders(engine) == []  # the listener stopped: its lock went with its connection


def intruder_url(engine: Engine) -> str:
    """A new login with no privilege on any table: its libpq URL."""
    role = f"intruder_{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
    return engine.url.set(drivername="postgresql", username=role,
                          password=None).render_as_string(hide_password=False)


@pytest.mark.timeout(120)
def test_a_session_that_takes_the_leader_lock_only_delays_the_rows(
        engine: Engine, broker: BrokerLiteServer, waking: Outbox) -> None:
    with psycopg.connect(intruder_url(engine), autocommit=True) as squatter:
        # advisory locks need no privilege: another role's session can hold the lock
        squatter.execute("SELECT pg_advisory_lock(%s)", (LEADER_LOCK,))
        with listening(engine, broker) as run:
            wait_until(lambda: listeners(engine), timeout=20)
            # no listener leads: the follower claims the rows once the grace has passed
            squatted = commit(engine, waking, 3, "Squatted")
            wait_until(lambda: relayed_ids(engine) == set(squatted), timeout=20,
                       message=lambda: f"relayed {relayed_ids(engine)}")
            assert leaders(engine) == []
            assert claimed(engine) == set(squatted)
            squatter.execute("SELECT pg_advisory_unlock(%s)", (LEADER_LOCK,))
            wait_until(lambda: leaders(engine), timeout=20)
            forget_claims(engine)
            led = commit(engine, waking, 2, "Squatted")
            wait_until(lambda: relayed_ids(engine) == {*squatted, *led}, timeout=20)
    assert run.fatal == []
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in [*squatted, *led]}


@pytest.mark.timeout(150)
def test_one_listener_leads_each_row_goes_once_and_a_follower_takes_over(
        engine: Engine, broker: BrokerLiteServer, waking: Outbox) -> None:
    with listening(engine, broker, follower_grace=600) as one, \
            listening(engine, broker, follower_grace=600) as two:
        wait_until(lambda: len(listeners(engine)) == 2 and len(leaders(engine)) == 1,
                   timeout=20)
        # both have made their first claiming pass (a wake-up at start) by the time a
        # row committed after it is relayed; a row may go twice while they make it
        warm = commit(engine, waking, 1, "Leader")
        wait_until(lambda: relayed_ids(engine) == set(warm), timeout=20)
        one_sent, two_sent = len(one.sent()), len(two.sent())
        before = commit(engine, waking, 10, "Leader")
        wait_until(lambda: relayed_ids(engine) == {*warm, *before}, timeout=20,
                   message=lambda: f"relayed {relayed_ids(engine)}")
        # the follower claimed nothing younger than its grace: one sender a row
        fresh = {id(one): one.sent()[one_sent:], id(two): two.sent()[two_sent:]}
        assert sorted(fresh[id(one)] + fresh[id(two)]) == sorted(before)
        leader, follower = (one, two) if fresh[id(one)] else (two, one)
        assert fresh[id(follower)] == []
        follower_sent = len(follower.sent())
        leader.listener.stop()  # its connection closes: the lock is free
        wait_until(lambda: len(leaders(engine)) == 1, timeout=20)
        after = commit(engine, waking, 5, "Leader")
        wait_until(lambda: relayed_ids(engine) == {*warm, *before, *after}, timeout=20,
                   message=lambda: f"relayed {relayed_ids(engine)}")
        assert sorted(follower.sent()[follower_sent:]) == sorted(after)
    assert one.fatal == two.fatal == []
    assert commit_counts(broker_records(broker.data_dir)) == {
        tx: 1 for tx in [*warm, *before, *after]}


@pytest.mark.timeout(120)
def test_named_rows_of_a_message_group_go_through_a_claim_in_order(
        engine: Engine, broker: BrokerLiteServer, waking: Outbox) -> None:
    with listening(engine, broker, catch_up_seconds=600) as run:
        plain = warm_leader(engine, waking, "Grouped")
        grouped = commit(engine, waking, 4, "Grouped", message_group="g-1")
        wait_until(lambda: relayed_ids(engine) == {*plain, *grouped}, timeout=20)
    assert run.fatal == []
    assert claimed(engine) == set(grouped)
    commits = [r["transaction_id"] for r in broker_records(broker.data_dir)
               if r["sysflag"] == "commit" and r["transaction_id"] in grouped]
    assert commits == grouped


@pytest.mark.timeout(120)
def test_a_row_sent_again_after_its_record_was_lost_is_still_one_message(
        engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=engine, broker=broker.native)
    [tx_id] = commit(engine, outbox, 1, "Again")
    publisher = BrokerLitePublisher(outbox)
    relay = Relay(outbox, publisher)
    assert relay.can_relay_read()
    assert not Relay(outbox, PassThrough(publisher)).can_relay_read()  # no dedup known
    query = text("SELECT half_offset, commit_offset FROM rocketbox_transaction "
                 "WHERE tx_id = :t")
    try:
        with psycopg.connect(libpq(engine), autocommit=True) as conn:
            due = read_due(conn, [tx_id, "NOT-A-ROW"])
            assert [r.tx_id for r in due.rows] == [tx_id] and not due.need_claim
            assert relay.relay_read(due.rows).report.relayed == 1
            assert read_due(conn, [tx_id]) == DueRows([], False)  # relayed: not due
            with engine.begin() as db:
                first = db.execute(query, {"t": tx_id}).one()
                # the record lost (a crash right after the broker answered)
                db.execute(text("UPDATE rocketbox_transaction SET relayed_at = NULL, "
                                "half_offset = NULL, commit_offset = NULL WHERE tx_id = :t"),
                           {"t": tx_id})
            again = relay.relay_read(read_due(conn, [tx_id]).rows)
            assert again.report.relayed == 1 and not again.left_due
        with engine.connect() as db:
            assert db.execute(query, {"t": tx_id}).one() == first
    finally:
        publisher.close()
    assert commit_counts(broker_records(broker.data_dir)) == {tx_id: 1}
    halves = [r for r in broker_records(broker.data_dir)
              if r["transaction_id"] == tx_id and r["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"]
    assert len(halves) == 1


def test_wake_payloads_name_every_id_under_postgresqls_limit() -> None:
    ids = [f"{n:064d}" for n in range(1000)]
    payloads = list(wake_payloads(ids))
    assert len(payloads) > 1
    assert all(len(p.encode()) <= MAX_PAYLOAD for p in payloads)
    assert [tx for p in payloads for tx in parse_wake(p) or []] == ids
    assert parse_wake(wake_payload("a,b\"c")) == ["a,b\"c"]
    assert list(wake_payloads([])) == []
    # a payload that names no row: a claiming pass
    for payload in ["", "not json", "[1, 2]", '{"tx_id": "x"}', "[\"x\""]:
        assert parse_wake(payload) is None
