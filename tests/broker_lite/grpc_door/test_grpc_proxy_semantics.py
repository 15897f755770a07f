"""``broker-lite serve --grpc-proxy-semantics``: the gRPC door as strict as RocketMQ 5's proxy.

Each test runs a real broker in proxy mode and talks to it with the official
client (or, for requests the client never sends, a bare stub signed like it).
What each behaviour copies from RocketMQ's proxy is in
docs/grpc-proxy-semantics.md. The halves a broker stored are counted from its
log (``support.halves``), as the RocketMQ target's tests count them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from rocketmq import Producer, SimpleConsumer, TransactionResolution
from rocketmq.grpc_protocol import Code
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.v5.exception import ClientException, IllegalArgumentException

from broker_lite.client import Admin
from tests.broker_lite.grpc_door.grpc_support import (
    FAST_GRPC_BROKER,
    Checker,
    config,
    make_message,
    raw_metadata,
    raw_stub,
    running,
    simple_consumer,
)
from tests.support import BrokerLiteServer, slow_half_broker, start_broker_lite, wait_until
from tests.support.halves import halves_stored

pytestmark = pytest.mark.grpc

PROXY = "--grpc-proxy-semantics"
NOT_FOUND = "cannot found transaction data"
TX_TOPIC = "Payments"
TRANSACTION = {"message.type": "TRANSACTION"}


@contextlib.contextmanager
def _proxy_broker(data_dir: Path, *extra: str, command: Sequence[str] | None = None
                  ) -> Iterator[BrokerLiteServer]:
    """A broker in proxy mode with a TRANSACTION topic ``Payments``; no traceback after."""
    with start_broker_lite(data_dir, [*FAST_GRPC_BROKER, PROXY, *extra],
                           command=command) as server:
        with Admin(server.native) as admin:
            admin.create_topic(TX_TOPIC, queues=2, attributes=TRANSACTION)
        yield server
        log = server.stderr_text()
    assert "Traceback" not in log, log[-4000:]


def _consumer(endpoint: str, group: str) -> SimpleConsumer:
    return simple_consumer(endpoint, group, TX_TOPIC)


def _drain(consumer: SimpleConsumer, polls: int = 2) -> list[Any]:
    """What ``polls`` more receives (each long-polls a second) find; acked."""
    got: list[Any] = []
    for _ in range(polls):
        for msg in consumer.receive(16, 10):
            consumer.ack(msg)
            got.append(msg)
    return got


def _receive(consumer: SimpleConsumer, count: int) -> list[Any]:
    got: list[Any] = []

    def more() -> bool:
        got.extend(_drain(consumer, 1))
        return len(got) >= count

    wait_until(more, timeout=30, message=lambda: f"{len(got)} of {count} messages received")
    return got


def _half(topic: str, message_id: str, *, keys: tuple[str, ...] = (),
          kind: int = pb.MessageType.TRANSACTION) -> Any:
    return pb.Message(topic=pb.Resource(name=topic), body=b"row", system_properties=(
        pb.SystemProperties(message_id=message_id, message_type=kind, keys=list(keys),
                            body_encoding=pb.Encoding.IDENTITY)))


def _send(endpoint: str, *messages: Any) -> Any:
    with raw_stub(endpoint) as stub:
        return stub.SendMessage(spb.SendMessageRequest(messages=list(messages)),
                                metadata=raw_metadata(), timeout=10)


def _end(endpoint: str, transaction_id: str, resolution: int = pb.TransactionResolution.COMMIT,
         topic: str = TX_TOPIC) -> Any:
    with raw_stub(endpoint) as stub:
        return stub.EndTransaction(spb.EndTransactionRequest(
            topic=pb.Resource(name=topic), transaction_id=transaction_id,
            resolution=resolution, source=pb.TransactionSource.SOURCE_CLIENT),
            metadata=raw_metadata(), timeout=10).status


@pytest.mark.timeout(90)
def test_commit_reaches_a_consumer_once_rollback_never_and_a_retried_end_fails(
        tmp_path: Path) -> None:
    # check-backs late enough not to race the client's own ends on a busy machine
    with _proxy_broker(tmp_path / "b", "--tx-timeout", "20") as broker:
        checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
        with running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)) as producer, \
                running(_consumer(broker.grpc, "ledger")) as consumer:
            kept = producer.begin_transaction()
            receipt = producer.send(make_message(TX_TOPIC, "kept", keys=["row-1"]), kept)
            dropped = producer.begin_transaction()
            producer.send(make_message(TX_TOPIC, "dropped", keys=["row-2"]), dropped)
            kept.commit()
            dropped.rollback()
            got = _receive(consumer, 1)
            assert [(m.body, m.message_id) for m in got] == [(b"kept", receipt.message_id)]
            with pytest.raises(ClientException, match=NOT_FOUND) as retried:
                kept.commit()  # the data was used by the first end
            assert retried.value.code == Code.INTERNAL_SERVER_ERROR
            assert _drain(consumer) == []  # committed once; the rollback stays invisible
        log = broker.stderr_text()
    assert [len(halves_stored(log, key=k)) for k in ("row-1", "row-2")] == [1, 1]


@pytest.mark.timeout(90)
def test_an_end_after_the_window_fails_and_check_back_commits_exactly_once(
        tmp_path: Path) -> None:
    flags = ("--grpc-transaction-data-expire", "1", "--tx-timeout", "4")
    with _proxy_broker(tmp_path / "b", *flags) as broker:
        checker = Checker(TransactionResolution.COMMIT)
        with running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)) as producer, \
                running(_consumer(broker.grpc, "ledger")) as consumer:
            late = producer.begin_transaction()
            sent_at = time.monotonic()
            receipt = producer.send(make_message(TX_TOPIC, "late", keys=["row-3"]), late)
            # what this test is about is the window passing: wait for the clock itself
            wait_until(lambda: time.monotonic() > sent_at + 1.5, timeout=5)
            if checker.count():
                pytest.skip("the check-back came before the late end (machine too slow)")
            with pytest.raises(ClientException, match=NOT_FOUND):
                late.commit()
            got = _receive(consumer, 1)  # the check-back committed it
            assert [m.message_id for m in got] == [receipt.message_id]
            assert [m.message_id for m in checker.asked] == [receipt.message_id]
            assert _drain(consumer) == []
        assert len(halves_stored(broker.stderr_text(), key="row-3")) == 1


@pytest.mark.timeout(120)
def test_transaction_data_does_not_survive_a_restart_but_the_half_does(tmp_path: Path) -> None:
    data = tmp_path / "b"
    with _proxy_broker(data, "--tx-timeout", "30") as broker:
        checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
        with running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)) as producer:
            receipt = producer.send(make_message(TX_TOPIC, "open", keys=["row-4"]),
                                    producer.begin_transaction())
    with _proxy_broker(data, "--tx-timeout", "1") as broker:
        status = _end(broker.grpc, receipt.transaction_id)
        assert (status.code, NOT_FOUND in status.message) == (Code.INTERNAL_SERVER_ERROR, True)
        checker = Checker(TransactionResolution.COMMIT)
        with running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)), \
                running(_consumer(broker.grpc, "ledger")) as consumer:
            got = _receive(consumer, 1)
            assert [m.message_id for m in got] == [receipt.message_id]
            assert _drain(consumer) == []
        assert [m.message_id for m in checker.asked] == [receipt.message_id]
        assert halves_stored(broker.stderr_text(), key="row-4") == []  # none sent again


@pytest.mark.timeout(90)
def test_check_backs_stop_at_the_maximum_and_the_half_is_discarded(tmp_path: Path) -> None:
    flags = ("--tx-timeout", "1", "--tx-check-interval", "0.5", "--tx-check-max", "2")
    with _proxy_broker(tmp_path / "b", *flags) as broker:
        checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
        with running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)) as producer, \
                running(_consumer(broker.grpc, "ledger")) as consumer:
            receipt = producer.send(make_message(TX_TOPIC, "undecided", keys=["row-8"]),
                                    producer.begin_transaction())
            wait_until(lambda: "discarded to TRANS_CHECK_MAX_TIME_TOPIC" in
                       broker.stderr_text(), timeout=30, message="the half was never discarded")
            assert [m.message_id for m in checker.asked] == [receipt.message_id] * 2
            assert _drain(consumer) == []  # a discarded half is never delivered
        assert checker.count() == 2


@pytest.mark.timeout(90)
def test_a_half_sent_twice_is_two_halves_and_two_messages(tmp_path: Path) -> None:
    """A client's retry re-sends the same message id; RocketMQ stores it again."""
    with _proxy_broker(tmp_path / "b") as broker:
        first = _send(broker.grpc, _half(TX_TOPIC, "0A0B0C0D0E0F", keys=("row-5",)))
        again = _send(broker.grpc, _half(TX_TOPIC, "0A0B0C0D0E0F", keys=("row-5",)))
        assert [first.status.code, again.status.code] == [Code.OK, Code.OK]
        halves = halves_stored(broker.stderr_text(), key="row-5")
        assert [h["transaction_id"] for h in halves] == ["0A0B0C0D0E0F"] * 2
        assert halves[0]["commit_log_offset"] != halves[1]["commit_log_offset"]
        # each half has its own transaction data: two ends, then none left
        assert [_end(broker.grpc, "0A0B0C0D0E0F").code for _ in range(3)] == [
            Code.OK, Code.OK, Code.INTERNAL_SERVER_ERROR]
        with running(_consumer(broker.grpc, "ledger")) as consumer:
            got = _receive(consumer, 2)
            assert [m.message_id for m in got] == ["0A0B0C0D0E0F"] * 2
            assert _drain(consumer, 1) == []


@pytest.mark.timeout(90)
def test_a_send_that_times_out_after_the_half_was_stored_leaves_two_halves(
        tmp_path: Path) -> None:
    """The official client re-sends a timed-out half with the same message id; the
    door (test hook support/slow_half_broker.py: every 2nd half answered after 4 s) stores
    both, as RocketMQ does."""
    with _proxy_broker(tmp_path / "b", "--tx-timeout", "30",
                       command=slow_half_broker.command(2, 4)) as broker:
        checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
        cfg = config(broker.grpc, timeout=2)
        with running(Producer(cfg, (TX_TOPIC,), checker=checker)) as producer, \
                running(_consumer(broker.grpc, "ledger")) as consumer:
            producer.send(make_message(TX_TOPIC, "prompt", keys=["row-9"]),
                          producer.begin_transaction())  # half 1: answered at once
            retried = producer.begin_transaction()  # half 2 times out, half 3 is its re-send
            receipt = producer.send(make_message(TX_TOPIC, "retried", keys=["row-10"]),
                                    retried)
            halves = halves_stored(broker.stderr_text(), key="row-10")
            assert [h["transaction_id"] for h in halves] == [receipt.transaction_id] * 2
            retried.commit()  # ends the newest half; the first is left to check-back
            got = _receive(consumer, 1)
            assert [m.message_id for m in got] == [receipt.message_id]
        assert len(halves_stored(broker.stderr_text(), key="row-9")) == 1


@pytest.mark.timeout(60)
def test_transactional_batches_and_messages_of_the_wrong_type_are_refused(
        tmp_path: Path) -> None:
    with _proxy_broker(tmp_path / "b") as broker:
        with Admin(broker.native) as admin:
            admin.create_topic("Plain", queues=1)
        batch = _send(broker.grpc, _half(TX_TOPIC, "0B01", keys=("row-6",)),
                      _half(TX_TOPIC, "0B02", keys=("row-6",)))
        assert batch.status.code == Code.INTERNAL_SERVER_ERROR
        assert "transactional" in batch.status.message
        to_plain = _send(broker.grpc, _half("Plain", "0C01", keys=("row-6",)))
        assert to_plain.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert "message.type" in to_plain.status.message
        normal = _send(broker.grpc, _half(TX_TOPIC, "0D01", kind=pb.MessageType.NORMAL))
        assert normal.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        # the route tells the official client the type, so it refuses before sending
        checker = Checker(TransactionResolution.COMMIT)
        with running(Producer(config(broker.grpc), ("Plain",), checker=checker)) as producer:
            with pytest.raises(IllegalArgumentException, match="accept message types"):
                producer.send(make_message("Plain", "x"), producer.begin_transaction())
            assert producer.send(make_message("Plain", "normal")).message_id
        assert halves_stored(broker.stderr_text()) == []  # nothing was stored as a half
