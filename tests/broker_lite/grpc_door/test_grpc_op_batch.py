"""``--tx-op-batch-interval``: the op record closing a half waits for its batch, as on RocketMQ.

RocketMQ's broker writes the op record of an end in batches
(``transactionOpBatchInterval``, 3 s), so a half whose commit is already
written can still be checked back. The check renews the half; the op record
then closes only the first copy, so a COMMIT answered for the renewed copy
writes the message a second time (apache/rocketmq #5574, #8158). These tests
show the door reproduces that window, with the official client.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq import Producer, SimpleConsumer, TransactionResolution

from broker_lite.client import Admin
from tests.broker_lite.grpc_door.grpc_support import (
    FAST_GRPC_BROKER,
    Checker,
    config,
    make_message,
    receive,
    running,
    simple_consumer,
)
from tests.support import BrokerLiteServer, start_broker_lite, wait_until

pytestmark = pytest.mark.grpc

TX_TOPIC = "Payments"
#: a check of a half about 1.5 s old, its op record 4 s after the end, the next check of a
#: renewed copy 6 s after the first (after that copy's own op record, as on RocketMQ,
#: whose checks are 30 s apart)
WINDOW = ("--grpc-proxy-semantics", "--tx-timeout", "1.5", "--tx-check-interval", "6",
          "--tx-op-batch-interval", "4")


@contextlib.contextmanager
def _broker(data_dir: Path, *flags: str) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(data_dir, [*FAST_GRPC_BROKER, *flags]) as server:
        with Admin(server.native) as admin:
            admin.create_topic(TX_TOPIC, queues=1, attributes={"message.type": "TRANSACTION"})
        yield server
        log = server.stderr_text()
    assert "Traceback" not in log, log[-4000:]


def _consumer(endpoint: str) -> SimpleConsumer:
    return simple_consumer(endpoint, "ledger", TX_TOPIC)


def _commit_then_wait_for_a_check(broker: BrokerLiteServer, checker: Checker,
                                  consumer: SimpleConsumer) -> list[Any]:
    """Send one half, commit it at once, wait for the late check; what a consumer gets."""
    with running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)) as producer:
        tx = producer.begin_transaction()
        receipt = producer.send(make_message(TX_TOPIC, "paid", keys=["row-1"]), tx)
        tx.commit()  # OK: handed off; the commit record is written, its op record waits
        wait_until(lambda: checker.count() >= 1, timeout=20,
                   message="no check-back for the committed half")
        assert {m.message_id for m in checker.asked} == {receipt.message_id}
        got = receive(consumer, 1)
        # past the op records (4 s after each end) and the next check of a renewed copy
        return got + _collect(consumer, seconds=9)


def _collect(consumer: SimpleConsumer, *, seconds: float) -> list[Any]:
    """Everything ``consumer`` receives (and acks) in the next ``seconds`` (long polls)."""
    got: list[Any] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for msg in consumer.receive(16, 10):
            got.append(msg)
            consumer.ack(msg)
    return got


@pytest.mark.timeout(120)
def test_a_late_check_answered_commit_writes_the_message_twice(tmp_path: Path) -> None:
    with _broker(tmp_path / "b", *WINDOW) as broker, \
            running(_consumer(broker.grpc)) as consumer:
        got = _commit_then_wait_for_a_check(broker, Checker(TransactionResolution.COMMIT),
                                            consumer)
        log = broker.stderr_text()
    assert [m.body for m in got] == [b"paid", b"paid"]
    assert "committed again" in log


@pytest.mark.timeout(120)
def test_a_late_check_answered_rollback_leaves_one_message(tmp_path: Path) -> None:
    checker = Checker(TransactionResolution.ROLLBACK)
    with _broker(tmp_path / "b", *WINDOW) as broker, \
            running(_consumer(broker.grpc)) as consumer:
        got = _commit_then_wait_for_a_check(broker, checker, consumer)
        log = broker.stderr_text()
    assert [m.body for m in got] == [b"paid"]
    assert "committed again" not in log
    assert checker.count() == 1  # the rollback closed the renewed copy: no second check


@pytest.mark.timeout(60)
def test_without_the_option_a_committed_half_is_never_checked(tmp_path: Path) -> None:
    checker = Checker(TransactionResolution.COMMIT)
    flags = ("--grpc-proxy-semantics", "--tx-timeout", "1", "--tx-check-interval", "0.5")
    with _broker(tmp_path / "b", *flags) as broker, \
            running(_consumer(broker.grpc)) as consumer, \
            running(Producer(config(broker.grpc), (TX_TOPIC,), checker=checker)) as producer:
        tx = producer.begin_transaction()
        producer.send(make_message(TX_TOPIC, "paid", keys=["row-1"]), tx)
        tx.commit()
        got = receive(consumer, 1) + _collect(consumer, seconds=4)  # past the first check
    assert [m.body for m in got] == [b"paid"] and checker.count() == 0


def test_the_option_needs_proxy_mode(tmp_path: Path) -> None:
    from tests.support import ServerStartError

    with pytest.raises(ServerStartError, match="needs --grpc-proxy-semantics"), \
            start_broker_lite(tmp_path / "b", ["--tx-op-batch-interval", "3"]):
        pass
