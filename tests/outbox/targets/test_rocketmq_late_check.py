"""RocketMQ's late check-back: a half whose COMMIT the proxy took is checked before its op record.

broker_lite's gRPC door in proxy mode with ``--tx-op-batch-interval``
writes the op record that closes a half seconds after its end, as RocketMQ's
broker batches them, and a COMMIT answered for the check's renewed copy
writes the message a second time, as on RocketMQ (#5574, #8158). Real
PostgreSQL, the relay with the RocketMQ target, the official
``SimpleConsumer``; each test asserts what a consumer gets.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from sqlalchemy import Engine, create_engine, select

from broker_lite.client import Admin
from outbox import Outbox, RelaySettings, migrate, publish
from outbox.checkback_runner import run_checker
from outbox.models import transaction_table as t
from outbox.relay import Relay
from outbox.targets import EndOutcome, Publisher, TargetPublisher
from outbox.targets.rocketmq import TX_ID_PROPERTY, RocketMQTarget
from outbox.targets.rocketmq_checkback import StatusTableChecker
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until

pytestmark = [pytest.mark.grpc, pytest.mark.postgres]

#: a half is checked once 3 s old (the relay has ended it by then), its op record is
#: written 5 s after the end, and a renewed copy is checked again 8 s later (after its
#: own op record, as on RocketMQ, whose checks are 30 s apart and op batches 3 s)
LATE = ("--grpc-proxy-semantics", "--tx-timeout", "3", "--tx-check-interval", "8",
        "--tx-op-batch-interval", "5", "--grpc-transaction-data-expire", "10")
TOPIC = "Orders"
RELAY = RelaySettings(batch_size=50, backoff_base=0.05, backoff_max=0.2, jitter=0.0,
                      broker_timeout=5.0, lease_seconds=3.0)
LOST_END_BROKER = [sys.executable, str(Path(__file__).with_name("lost_end_broker.py"))]


@pytest.fixture
def pg_engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    db = postgres_server.create_database(f"rb_{uuid.uuid4().hex[:12]}")
    migrate.upgrade(db.url)
    engine = create_engine(db.url)
    yield engine
    engine.dispose()


@contextlib.contextmanager
def _door(data_dir: Path, command: list[str] | None = None) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(data_dir, LATE, command=command) as server:
        with Admin(server.native) as admin:
            admin.create_topic(TOPIC, attributes={"message.type": "TRANSACTION"})
        yield server
        log = server.stderr_text()
    assert "Traceback" not in log, log[-4000:]


@contextlib.contextmanager
def _consumer(door: BrokerLiteServer) -> Iterator[SimpleConsumer]:
    consumer = SimpleConsumer(ClientConfiguration(door.grpc, Credentials(), request_timeout=5),
                              "inventory", {TOPIC: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        yield consumer
    finally:
        consumer.shutdown()


def _tx_ids_received(consumer: SimpleConsumer, *, want: int, then: float) -> Counter[str]:
    """Receive (and ack) until ``want`` messages came, then for ``then`` seconds more."""
    got: Counter[str] = Counter()

    def more() -> bool:
        for msg in consumer.receive(32, 10):
            got[msg.properties[TX_ID_PROPERTY]] += 1
            consumer.ack(msg)
        return sum(got.values()) >= want

    wait_until(more, timeout=60, interval=0.05,
               message=lambda: f"{sum(got.values())} of {want} messages received")
    deadline = time.monotonic() + then  # the late checks and op records come in this time
    while time.monotonic() < deadline:
        more()
    return got


def _publish_rows(outbox: Outbox, count: int) -> list[str]:
    with outbox.sessionmaker().begin() as session:
        return [publish(session, TOPIC, {"n": n}, outbox=outbox) for n in range(count)]


def _relay_all(outbox: Outbox, publisher: Publisher, count: int) -> None:
    relayed = 0

    def more() -> bool:
        nonlocal relayed
        relayed += Relay(outbox, publisher).run_once().relayed
        return relayed >= count

    wait_until(more, timeout=60, interval=0.1, message=lambda: f"{relayed} of {count} relayed")


@pytest.mark.timeout(180)
def test_a_late_check_of_a_committed_half_makes_no_second_message(
        pg_engine: Engine, tmp_path: Path) -> None:
    with _door(tmp_path / "broker") as door:
        outbox = Outbox(engine=pg_engine, broker=f"rocketmq://{door.grpc}", relay=RELAY)
        rows = _publish_rows(outbox, 20)
        checker = StatusTableChecker(outbox)  # the relay's own producer gets the checks
        publisher = TargetPublisher(RocketMQTarget(outbox, checker=checker))
        try:
            with _consumer(door) as consumer:
                _relay_all(outbox, publisher, len(rows))
                # each half is checked once 3 s old, before its op record (5 s): the window
                wait_until(lambda: sum(checker.answered.values()) >= len(rows), timeout=30,
                           message=lambda: f"check-backs answered: {checker.answered}")
                got = _tx_ids_received(consumer, want=len(rows), then=12)
        finally:
            publisher.close()
        log = door.stderr_text()
    assert got == Counter(rows), {k: n for k, n in got.items() if n != 1}
    assert checker.answered["COMMIT"] == 0 and checker.answered["ROLLBACK"] >= len(rows)
    assert "committed again" not in log


@pytest.mark.timeout(180)
def test_an_end_the_broker_never_applied_is_committed_by_check_back_after_the_window(
        pg_engine: Engine, tmp_path: Path) -> None:
    with _door(tmp_path / "broker", command=LOST_END_BROKER) as door:
        # the first check (3 s after the half) comes after the window (1 s after the end)
        outbox = Outbox(engine=pg_engine, broker=f"rocketmq://{door.grpc}", relay=RELAY,
                        handoff_window=1.0)
        rows = _publish_rows(outbox, 5)
        checker = StatusTableChecker(outbox)
        publisher = TargetPublisher(RocketMQTarget(outbox, checker=checker))
        try:
            with _consumer(door) as consumer:
                _relay_all(outbox, publisher, len(rows))
                with pg_engine.connect() as conn:  # relayed: the proxy answered OK
                    assert set(conn.execute(select(t.c.commit_offset)).scalars()) == {-1}
                got = _tx_ids_received(consumer, want=len(rows), then=10)
        finally:
            publisher.close()
        log = door.stderr_text()
    assert log.count("answered OK and dropped") == len(rows)
    assert got == Counter(rows), {k: n for k, n in got.items() if n != 1}
    assert checker.answered["COMMIT"] == len(rows)


class _DiesBeforeEnd:
    """The relay's publisher, as a relay killed between the halves and the ends."""

    def __init__(self, inner: Publisher) -> None:
        self.inner = inner
        self.send_halves = inner.send_halves

    def end_transactions(self, ends: Any) -> list[EndOutcome]:
        raise _Killed

    def close(self) -> None:
        self.inner.close()


class _Killed(BaseException):
    """Stands for the relay process dying: nothing after it runs."""


@pytest.mark.timeout(180)
def test_a_relay_killed_between_half_and_end_is_committed_once_by_the_checker(
        pg_engine: Engine, tmp_path: Path) -> None:
    with _door(tmp_path / "broker") as door:
        outbox = Outbox(engine=pg_engine, broker=f"rocketmq://{door.grpc}", relay=RELAY)
        rows = _publish_rows(outbox, 5)
        dying = _DiesBeforeEnd(TargetPublisher(RocketMQTarget(outbox)))
        with pytest.raises(_Killed):
            Relay(outbox, dying, name="dies").run_once()  # type: ignore[arg-type]
        dying.close()
        stop, ready = threading.Event(), threading.Event()
        checker = threading.Thread(target=run_checker, args=(outbox,),
                                   kwargs={"stop": stop, "on_ready": ready.set}, daemon=True)
        checker.start()
        try:
            assert ready.wait(30)
            with _consumer(door) as consumer:
                got = _tx_ids_received(consumer, want=len(rows), then=10)
        finally:
            stop.set()
            checker.join(30)
    assert got == Counter(rows), {k: n for k, n in got.items() if n != 1}


def test_a_negative_handoff_window_is_one_error_naming_the_setting() -> None:
    from outbox.errors import ConfigurationError

    engine = create_engine("sqlite://")
    with pytest.raises(ConfigurationError, match="handoff_window must be >= 0 seconds, got -1"):
        Outbox(engine=engine, broker="rocketmq://127.0.0.1:8081", handoff_window=-1)
    assert Outbox(engine=engine, broker="rocketmq://127.0.0.1:8081").handoff_window == 10.0
