"""Transactions of the official RocketMQ 5 client, with check-back over Telemetry.

The broker runs with ``--tx-timeout 1 --tx-check-interval 0.5``: a half left
open is checked back about a second after it was stored, through a
``RecoverOrphanedTransactionCommand`` on the producer's Telemetry stream; the
client's checker answers with an EndTransaction of source SERVER_CHECK.
"""

from __future__ import annotations

import pytest
from grpc_support import Checker, config, make_message, receive, running
from rocketmq import FilterExpression, Producer, SimpleConsumer, TransactionResolution
from support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.grpc


def _consumer(endpoint: str, group: str, topic: str) -> SimpleConsumer:
    return SimpleConsumer(config(endpoint), group, {topic: FilterExpression()}, await_duration=1)


@pytest.mark.timeout(60)
def test_committed_transaction_is_received_once_and_rolled_back_never(
        grpc_broker: BrokerLiteServer) -> None:
    # On a loaded machine the check below can outlast --tx-timeout, so a check-back
    # may come before the client's own commit: answering UNKNOWN leaves the decision
    # to the client, which is what this test is about.
    checker = Checker(TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
    cfg = config(grpc_broker.grpc)
    with running(Producer(cfg, ("Payments",), checker=checker)) as producer, \
            running(_consumer(grpc_broker.grpc, "ledger", "Payments")) as consumer:
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
    checker = Checker(TransactionResolution.COMMIT)
    cfg = config(grpc_broker.grpc)
    with running(Producer(cfg, ("Orphans",), checker=checker)) as producer, \
            running(_consumer(grpc_broker.grpc, "rescuers", "Orphans")) as consumer:
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
    checker = Checker(TransactionResolution.ROLLBACK)
    cfg = config(grpc_broker.grpc)
    with running(Producer(cfg, ("Abandoned",), checker=checker)) as producer, \
            running(_consumer(grpc_broker.grpc, "watchers", "Abandoned")) as consumer:
        producer.send(make_message("Abandoned", "never"), producer.begin_transaction())
        wait_until(checker.count, timeout=15, message="the checker was never asked")
        # each empty receive long-polls a second: several check intervals pass
        for _ in range(3):
            assert consumer.receive(16, 10) == []
    assert checker.count() == 1  # resolved: never checked again
