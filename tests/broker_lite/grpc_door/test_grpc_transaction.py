"""Transactions of the official RocketMQ 5 client, with check-back over Telemetry.

The broker runs with ``--tx-timeout 1 --tx-check-interval 0.5``: a half left
open is checked back about a second after it was stored, through a
``RecoverOrphanedTransactionCommand`` on the producer's Telemetry stream; the
client's checker answers with an EndTransaction of source SERVER_CHECK.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from rocketmq import Producer, SimpleConsumer, TransactionResolution

from tests.broker_lite.grpc_door.grpc_support import (
    Checker,
    config,
    make_message,
    receive,
    running,
    simple_consumer,
)
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.grpc


@contextlib.contextmanager
def _clients(broker: BrokerLiteServer, topic: str, group: str,
             answer: TransactionResolution) -> Iterator[tuple[Producer, SimpleConsumer, Checker]]:
    """A transactional producer whose checker answers ``answer``, and a consumer of ``topic``."""
    checker = Checker(answer)
    with running(Producer(config(broker.grpc), (topic,), checker=checker)) as producer, \
            running(simple_consumer(broker.grpc, group, topic)) as consumer:
        yield producer, consumer, checker


@pytest.mark.timeout(60)
def test_committed_transaction_is_received_once_and_rolled_back_never(
        grpc_broker: BrokerLiteServer) -> None:
    # On a loaded machine the check below can outlast --tx-timeout, so a check-back
    # may come before the client's own commit: answering UNKNOWN leaves the decision
    # to the client, which is what this test is about.
    with _clients(grpc_broker, "Payments", "ledger",
                  TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED) as (
            producer, consumer, checker):
        kept = producer.begin_transaction()
        receipt = producer.send(make_message("Payments", "kept", keys=["p-1"]), kept)
        assert receipt.transaction_id
        dropped = producer.begin_transaction()
        producer.send(make_message("Payments", "dropped"), dropped)
        assert consumer.receive(16, 10) == []  # halves are invisible
        kept.commit()
        dropped.rollback()
        got = receive(consumer, 1)
        assert [(m.body, m.message_id) for m in got] == [(b"kept", receipt.message_id)]
        assert got[0].keys == {"p-1"}
        # the rollback is final: the rolled-back half never shows up
        assert consumer.receive(16, 10) == [] and consumer.receive(16, 10) == []
    # any check-back came before the client resolved them (answered UNKNOWN)
    assert {m.body for m in checker.asked} <= {b"kept", b"dropped"}


@pytest.mark.timeout(60)
def test_open_transaction_is_committed_by_the_checker_through_telemetry(
        grpc_broker: BrokerLiteServer) -> None:
    with _clients(grpc_broker, "Orphans", "rescuers", TransactionResolution.COMMIT) as (
            producer, consumer, checker):
        receipt = producer.send(make_message("Orphans", "left open", tag="t"),
                                producer.begin_transaction())
        wait_until(checker.count, timeout=15, message="the checker was never asked")
        asked = checker.asked[0]
        assert (asked.message_id, asked.body, asked.tag) == (receipt.message_id, b"left open", "t")
        got = receive(consumer, 1)
        assert [m.message_id for m in got] == [receipt.message_id]
        assert consumer.receive(16, 10) == []  # committed once, delivered once
    assert checker.count() == 1


@pytest.mark.timeout(60)
def test_open_transaction_rolled_back_by_the_checker_stays_invisible(
        grpc_broker: BrokerLiteServer) -> None:
    with _clients(grpc_broker, "Abandoned", "watchers", TransactionResolution.ROLLBACK) as (
            producer, consumer, checker):
        producer.send(make_message("Abandoned", "never"), producer.begin_transaction())
        wait_until(checker.count, timeout=15, message="the checker was never asked")
        # each empty receive long-polls a second: several check intervals pass
        for _ in range(3):
            assert consumer.receive(16, 10) == []
    assert checker.count() == 1  # resolved: never checked again
