"""Messages cross between the doors: same ids, keys, tags, properties and message group."""

from __future__ import annotations

import pytest
from rocketmq import Producer, TransactionChecker

from broker_lite.client import Message, PushConsumer, ReceivedMessage
from broker_lite.client import Producer as NativeProducer
from tests.broker_lite.grpc_door.grpc_support import (
    config,
    make_message,
    receive,
    running,
    simple_consumer,
)
from tests.support import BrokerLiteServer, wait_until
from tests.support.recorder import Recorder

pytestmark = pytest.mark.grpc


class _Never(TransactionChecker):
    def check(self, message: object) -> int:
        raise AssertionError("no check-back expected")


def _consume_natively(broker: BrokerLiteServer, group: str, topic: str,
                      count: int) -> list[ReceivedMessage]:
    seen = Recorder()
    consumer = PushConsumer(group, broker.native, listener=seen)
    consumer.subscribe(topic)
    consumer.start()
    try:
        wait_until(lambda: seen.count() >= count, timeout=20,
                   message=lambda: f"{seen.count()} of {count} consumed natively")
    finally:
        consumer.shutdown()
    return seen.messages()


@pytest.mark.timeout(60)
def test_sent_through_grpc_consumed_through_the_native_client(
        grpc_broker: BrokerLiteServer) -> None:
    cfg = config(grpc_broker.grpc)
    with running(Producer(cfg, ("Crossing",), checker=_Never())) as producer:
        plain = producer.send(make_message("Crossing", "plain", tag="a", keys=["k1", "k2"],
                                           properties={"colour": "blue"}))
        grouped = producer.send(make_message("Crossing", "grouped", group="g-1"))
        tx = producer.begin_transaction()
        half = producer.send(make_message("Crossing", "in a transaction", tag="tx"), tx)
        tx.commit()
    seen = {m.msg_id: m for m in _consume_natively(grpc_broker, "natives", "Crossing", 3)}
    assert set(seen) == {plain.message_id, grouped.message_id, half.message_id}
    first = seen[plain.message_id]
    assert (first.body, first.tags, sorted(first.keys)) == (b"plain", "a", ["k1", "k2"])
    assert first.properties["colour"] == "blue"
    assert seen[grouped.message_id].properties["__SHARDINGKEY"] == "g-1"
    assert seen[half.message_id].transaction_id == half.transaction_id
    assert seen[half.message_id].tags == "tx"


@pytest.mark.timeout(60)
def test_sent_natively_consumed_through_grpc(grpc_broker: BrokerLiteServer) -> None:
    with NativeProducer("native-producer", grpc_broker.native) as producer:
        results = [
            producer.send(Message("Inbound", "one", tags="t1", keys=["a", "b"],
                                  properties={"origin": "native"})),
            producer.send(Message("Inbound", "two", message_group="orders-7")),
        ]
    consumer = simple_consumer(grpc_broker.grpc, "grpc-readers", "Inbound")
    with running(consumer):
        got = {m.message_id: m for m in receive(consumer, 2)}
    assert set(got) == {r.msg_id for r in results}
    one, two = got[results[0].msg_id], got[results[1].msg_id]
    assert (one.body, one.tag, one.keys, one.properties) == (
        b"one", "t1", {"a", "b"}, {"origin": "native"})
    assert (two.body, two.message_group, two.properties) == (b"two", "orders-7", {})
