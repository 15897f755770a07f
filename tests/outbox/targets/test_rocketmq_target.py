"""The RocketMQ 5 target, through broker_lite's gRPC door and the official client.

Real PostgreSQL, a real broker on loopback (check-backs about a second after
a half is stored), the relay with the RocketMQ target only, and the official
``SimpleConsumer`` counting what reaches a consumer group.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from sqlalchemy import Engine, create_engine, select

from broker_lite.client import Admin
from outbox import Outbox, RelaySettings, migrate, publish
from outbox.checkback_runner import run_checker
from outbox.cli import main
from outbox.errors import BrokerUnreachableError, ConfigurationError, RowFault, RowRefusedError
from outbox.inbox_rocketmq import RocketMQInbox
from outbox.models import transaction_table as t
from outbox.relay import Relay
from outbox.targets import (
    EndOutcome,
    HalfOutcome,
    OutgoingMessage,
    Publisher,
    TargetPublisher,
    TxEnd,
)
from outbox.targets.choose import publisher_for
from outbox.targets.rocketmq import TX_ID_PROPERTY, RocketMQTarget, probe
from outbox.targets.rocketmq_checkback import StatusTableChecker
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until
from tests.support.halves import halves_stored

pytestmark = [pytest.mark.grpc, pytest.mark.postgres]

#: broker_lite's gRPC door as RocketMQ's proxy behaves (remove-on-use transaction data in a
#: window, no half de-dup, TRANSACTION topics required), check-backs about a second after
#: a half is stored
FAST = ("--grpc-proxy-semantics", "--tx-timeout", "1", "--tx-check-interval", "0.3",
        "--grpc-transaction-data-expire", "5")
#: the outbox's topics, typed TRANSACTION as `mqadmin updateTopic -a +message.type=...` does
TX_TOPICS = ("Orders", "Payments", "Invoices", "Refunds", "Shipments")
RELAY = RelaySettings(batch_size=50, backoff_base=0.05, backoff_max=0.2, jitter=0.0,
                      broker_timeout=5.0, lease_seconds=3.0)


@pytest.fixture
def pg_engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    """A fresh database at the migrations' head."""
    db = postgres_server.create_database(f"rb_{uuid.uuid4().hex[:12]}")
    migrate.upgrade(db.url)
    engine = create_engine(db.url)
    yield engine
    engine.dispose()


@contextlib.contextmanager
def _proxy(data_dir: Path, *extra: str) -> Iterator[BrokerLiteServer]:
    """A broker in proxy mode with the outbox's TRANSACTION topics; no traceback after."""
    with start_broker_lite(data_dir, (*FAST, *extra)) as server:
        with Admin(server.native) as admin:
            for topic in TX_TOPICS:
                admin.create_topic(topic, attributes={"message.type": "TRANSACTION"})
        yield server
        log = server.stderr_text()
    assert "Traceback" not in log, log[-4000:]


@pytest.fixture
def door(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with _proxy(tmp_path / "broker") as server:
        yield server


def _outbox(engine: Engine, door: BrokerLiteServer, **keys: str) -> Outbox:
    return Outbox(engine=engine, broker=f"rocketmq://{door.grpc}", relay=RELAY,
                  local_tx_timeout=5.0, **keys)  # type: ignore[arg-type]


@contextlib.contextmanager
def _consumer(door: BrokerLiteServer, topic: str) -> Iterator[SimpleConsumer]:
    config = ClientConfiguration(door.grpc, Credentials(), request_timeout=5)
    consumer = SimpleConsumer(config, f"{topic}-readers",
                              {topic: FilterExpression()}, await_duration=1)
    consumer.startup()
    try:
        yield consumer
    finally:
        consumer.shutdown()


def _drain(consumer: SimpleConsumer, *, want: int, timeout: float = 20.0) -> list[object]:
    """Receive (and ack) until ``want`` came, then poll twice more for any extra."""
    got: list[object] = []

    def more() -> bool:
        for msg in consumer.receive(16, 10):
            got.append(msg)
            consumer.ack(msg)
        return len(got) >= want

    wait_until(more, timeout=timeout, interval=0.05,
               message=lambda: f"{len(got)} of {want} messages received")
    for _ in range(2):
        for msg in consumer.receive(16, 10):
            got.append(msg)
            consumer.ack(msg)
    return got


def _publish(outbox: Outbox, topic: str, body: object, state: str = "COMMIT") -> str:
    with outbox.sessionmaker().begin() as session:
        return publish(session, topic, body, outbox=outbox, state=state)


def _row(engine: Engine, tx_id: str) -> dict[str, object]:
    with engine.connect() as conn:
        return dict(conn.execute(select(t).where(t.c.tx_id == tx_id)).mappings().one())


class Counting:
    """The relay's publisher, counting the halves it is asked to send (a seam double)."""

    def __init__(self, inner: Publisher, *, die_before_end: bool = False) -> None:
        self.inner = inner
        self.halves: list[str] = []
        self.die_before_end = die_before_end
        self._lock = threading.Lock()

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        with self._lock:
            self.halves.extend(m.tx_id for m in messages)
        return self.inner.send_halves(messages)

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        if self.die_before_end:
            raise _Killed("the relay died between the half and the end")
        return self.inner.end_transactions(ends)

    def close(self) -> None:
        self.inner.close()


class _Killed(BaseException):
    """Stands for the relay process dying: nothing after it runs."""


@pytest.mark.timeout(90)
def test_commit_gives_one_message_and_rollback_none(pg_engine: Engine,
                                                    door: BrokerLiteServer) -> None:
    outbox = _outbox(pg_engine, door)
    kept = _publish(outbox, "Orders", {"n": 1})
    dropped = _publish(outbox, "Orders", {"n": 2}, state="ROLLBACK")
    publisher = publisher_for(outbox)
    try:
        with _consumer(door, "Orders") as consumer:
            report = Relay(outbox, publisher).run_once()
            assert (report.relayed, report.failed) == (2, 0)
            got = _drain(consumer, want=1)
    finally:
        publisher.close()
    assert [(m.body, m.properties[TX_ID_PROPERTY]) for m in got] == [  # type: ignore[attr-defined]
        (b'{"n":1}', kept)]
    assert kept in got[0].keys  # type: ignore[attr-defined]
    for tx_id in (kept, dropped):
        row = _row(pg_engine, tx_id)
        assert row["relayed_at"] is not None
        assert row["half_message_id"] and row["half_transaction_id"]


@pytest.mark.timeout(120)
def test_relay_killed_between_half_and_end_commits_once_by_check_back(
        pg_engine: Engine, door: BrokerLiteServer) -> None:
    outbox = _outbox(pg_engine, door)
    tx_id = _publish(outbox, "Payments", {"amount": 5})
    dying = Counting(publisher_for(outbox), die_before_end=True)
    with pytest.raises(_Killed):
        Relay(outbox, dying, name="dies").run_once()
    recorded = _row(pg_engine, tx_id)["half_message_id"]
    assert recorded, "the half's ids are on the row before its end is sent"
    dying.close()  # its Telemetry stream goes: the check-back needs another producer
    responder = TargetPublisher(RocketMQTarget(outbox, checker=StatusTableChecker(outbox)))
    next_relay = Counting(publisher_for(outbox))
    try:
        with _consumer(door, "Payments") as consumer:
            # the claim of the dead relay runs out; the next relay never sends a second half
            wait_until(lambda: Relay(outbox, next_relay, name="next").run_once(
                ).relayed == 1, timeout=60, interval=0.2)
            got = _drain(consumer, want=1)
    finally:
        next_relay.close()
        responder.close()
    assert dying.halves == [tx_id] and next_relay.halves == []
    assert [m.message_id for m in got] == [recorded]  # type: ignore[attr-defined]
    assert [h["message_id"] for h in halves_stored(door.stderr_text(), key=tx_id)] == [recorded]


@pytest.mark.timeout(120)
def test_a_second_half_for_one_row_is_rolled_back_by_check_back(
        pg_engine: Engine, door: BrokerLiteServer) -> None:
    outbox = _outbox(pg_engine, door)
    tx_id = _publish(outbox, "Invoices", {"total": 9})
    row = _row(pg_engine, tx_id)
    # a half the proxy stored whose answer was lost (a timed-out send): never recorded;
    # its producer stays up to answer the check-back, from the status table
    lost = TargetPublisher(RocketMQTarget(outbox, checker=(checker := StatusTableChecker(outbox))))
    publisher = publisher_for(outbox)
    try:
        [orphan] = lost.send_halves([OutgoingMessage(
            tx_id=tx_id, topic="Invoices", body=row["body"], tag=None,  # type: ignore[arg-type]
            keys=(), message_group=None, properties={})])
        with _consumer(door, "Invoices") as consumer:
            assert Relay(outbox, publisher).run_once().relayed == 1
            got = _drain(consumer, want=1)
            wait_until(lambda: checker.answered["ROLLBACK"] >= 1, timeout=30,
                       message=lambda: f"check-back answers {checker.answered}")
            assert consumer.receive(16, 10) == []
    finally:
        publisher.close()
        lost.close()
    recorded = _row(pg_engine, tx_id)["half_message_id"]
    assert [m.message_id for m in got] == [recorded]  # type: ignore[attr-defined]
    assert recorded != orphan.message_id  # type: ignore[union-attr]
    assert checker.answered["COMMIT"] == 0


@pytest.mark.timeout(90)
def test_wrong_credentials_are_one_config_error_and_nothing_is_relayed(
        pg_engine: Engine, tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [
        {"access_key": "relay", "secret_key": "right", "default_topic_perm": "PUB|SUB"},
        {"access_key": "ops", "secret_key": "ops-secret", "admin": True}]}))
    with start_broker_lite(tmp_path / "broker", (*FAST, "--acl", str(acl))) as door:
        with Admin(door.native, access_key="ops", secret_key="ops-secret") as admin:
            admin.create_topic("Orders", attributes={"message.type": "TRANSACTION"})
        outbox = _outbox(pg_engine, door, access_key="relay", secret_key="wrong")
        with pytest.raises(ConfigurationError, match=r"refused the credentials"
                                                     r" \(--access-key/--secret-key\)") as caught:
            probe(outbox)
        assert door.grpc in str(caught.value)
        assert probe(_outbox(pg_engine, door, access_key="relay", secret_key="right")) is None
        tx_id = _publish(outbox, "Orders", {"n": 1})
        publisher = publisher_for(outbox)
        try:
            report = Relay(outbox, publisher).run_once()
        finally:
            publisher.close()
    assert (report.relayed, report.failed) == (0, 1)
    row = _row(pg_engine, tx_id)
    assert row["relayed_at"] is None and row["half_message_id"] is None
    # the proxy's own words (UNAUTHORIZED)
    assert "the signature does not match" in str(row["last_error"])


def test_refusals_say_what_fixes_them() -> None:
    from rocketmq.v5.exception import NotFoundException, PayloadTooLargeException

    from outbox.targets.rocketmq import fault_of

    assert fault_of(NotFoundException("topic not found")) is RowFault.CONFIG
    assert fault_of(PayloadTooLargeException("too big")) is RowFault.ROW_INVALID
    assert fault_of(TimeoutError()) is None
    assert issubclass(RowRefusedError, Exception)


@pytest.mark.timeout(120)
def test_the_checker_alone_commits_a_dead_relays_recorded_half_once(
        pg_engine: Engine, door: BrokerLiteServer) -> None:
    outbox = _outbox(pg_engine, door)
    tx_id = _publish(outbox, "Refunds", {"id": 3})
    other = _publish(outbox, "Refunds", {"id": 4}, state="ROLLBACK")
    dying = Counting(publisher_for(outbox), die_before_end=True)
    with pytest.raises(_Killed):
        Relay(outbox, dying, name="dies").run_once()
    dying.close()
    recorded = _row(pg_engine, tx_id)["half_message_id"]
    stop = threading.Event()
    ready = threading.Event()
    checker = threading.Thread(target=run_checker, args=(outbox,),
                               kwargs={"stop": stop, "on_ready": ready.set}, daemon=True)
    checker.start()
    try:
        assert ready.wait(30)
        with _consumer(door, "Refunds") as consumer:
            got = _drain(consumer, want=1, timeout=40)
    finally:
        stop.set()
        checker.join(30)
    assert not checker.is_alive()
    assert [(m.message_id, m.properties[TX_ID_PROPERTY])  # type: ignore[attr-defined]
            for m in got] == [(recorded, tx_id)]
    assert other not in {m.properties[TX_ID_PROPERTY] for m in got}  # type: ignore[attr-defined]


@pytest.mark.timeout(90)
def test_rocketbox_checker_exits_2_on_wrong_credentials(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [{"access_key": "relay", "secret_key": "right"}]}))
    url = f"sqlite:///{tmp_path / 'outbox.sqlite'}"
    migrate.upgrade(url)
    with start_broker_lite(tmp_path / "broker", (*FAST, "--acl", str(acl))) as door:
        code = main(["checker", "--db", url, "--broker", f"rocketmq://{door.grpc}",
                     "--access-key", "relay", "--secret-key", "wrong"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"rocketbox checker: RocketMQ proxy {door.grpc} ") and \
        "refused the credentials" in err and err.count("\n") == 1


@pytest.mark.timeout(90)
def test_the_inbox_processes_two_messages_of_one_row_once(pg_engine: Engine,
                                                         door: BrokerLiteServer) -> None:
    outbox = _outbox(pg_engine, door)
    seen: list[bytes] = []
    inbox = RocketMQInbox("billing", lambda _session, m: seen.append(m.body), outbox=outbox)
    config = ClientConfiguration(door.grpc, Credentials(), request_timeout=5)
    producer = Producer(config, ("Ledger",))
    producer.startup()
    try:
        with _consumer(door, "Ledger") as consumer:
            for body in (b"first", b"again"):  # two messages, one row's tx_id
                message = Message()
                message.topic, message.body = "Ledger", body
                message.add_property(TX_ID_PROPERTY, "row-1")
                producer.send(message)
            got = _drain(consumer, want=2)
    finally:
        producer.shutdown()
    assert len({m.message_id for m in got}) == 2  # type: ignore[attr-defined]
    assert [inbox.handle(m) for m in got] == [True, True]
    assert len(seen) == 1 and inbox.counts == {"processed": 1, "duplicates": 1, "failed": 0}


@pytest.mark.timeout(120)
def test_rows_wait_through_an_outage_then_flow_once(pg_engine: Engine, tmp_path: Path) -> None:
    with socket.socket() as probe_socket:  # a loopback port nobody listens on (yet)
        probe_socket.bind(("127.0.0.1", 0))
        port = probe_socket.getsockname()[1]
    outbox = Outbox(engine=pg_engine, broker=f"rocketmq://127.0.0.1:{port}", relay=RELAY)
    tx_id = _publish(outbox, "Shipments", {"n": 1})
    publisher = publisher_for(outbox)
    relay = Relay(outbox, publisher)
    try:
        with pytest.raises(BrokerUnreachableError):
            relay.run_once()
        row = _row(pg_engine, tx_id)
        assert (row["attempts"], row["relayed_at"], row["claimed_by"]) == (0, None, None)
        with _proxy(tmp_path / "broker", "--grpc-port", str(port)) as door, \
                _consumer(door, "Shipments") as consumer:

            def relayed() -> bool:
                with contextlib.suppress(BrokerUnreachableError):
                    return relay.run_once().relayed == 1
                return False

            wait_until(relayed, timeout=60, interval=0.5)
            got = _drain(consumer, want=1)
    finally:
        publisher.close()
    assert [m.properties[TX_ID_PROPERTY] for m in got] == [tx_id]  # type: ignore[attr-defined]


@pytest.mark.timeout(120)
def test_an_end_after_the_proxy_window_is_left_to_check_back_and_commits_once(
        pg_engine: Engine, tmp_path: Path) -> None:
    # the proxy forgets a transaction after 1 s; the next relay claims the row after the
    # dead relay's 3 s lease, so its end always comes too late
    with _proxy(tmp_path / "broker", "--grpc-transaction-data-expire", "1") as door:
        outbox = _outbox(pg_engine, door)
        tx_id = _publish(outbox, "Payments", {"late": True})
        dying = Counting(publisher_for(outbox), die_before_end=True)
        with pytest.raises(_Killed):
            Relay(outbox, dying, name="dies").run_once()
        dying.close()
        recorded = _row(pg_engine, tx_id)["half_message_id"]
        late = Counting(publisher_for(outbox))
        stop = threading.Event()
        checker = threading.Thread(target=run_checker, args=(outbox,), kwargs={"stop": stop},
                                   daemon=True)  # `rocketbox checker`
        checker.start()
        try:
            with _consumer(door, "Payments") as consumer:
                wait_until(lambda: Relay(outbox, late, name="late").run_once().relayed == 1,
                           timeout=60, interval=0.2)
                row = _row(pg_engine, tx_id)
                # relayed, but no commit was acknowledged: the check-back owns the half
                assert row["relayed_at"] is not None and row["commit_offset"] is None
                assert (row["attempts"], row["parked"]) == (0, False)
                got = _drain(consumer, want=1, timeout=40)
        finally:
            late.close()
            stop.set()
            checker.join(30)
        halves = halves_stored(door.stderr_text(), key=tx_id)
    assert late.halves == [] and [h["message_id"] for h in halves] == [recorded]
    assert [m.message_id for m in got] == [recorded]  # type: ignore[attr-defined]
