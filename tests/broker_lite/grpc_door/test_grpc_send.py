"""The official RocketMQ 5 client produces and consumes through broker_lite's gRPC door.

NORMAL messages are received and acked exactly once; FIFO messages of one
message group come in send order; a DELAY message stays invisible until its
delivery time.
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer

from tests.broker_lite.grpc_door.grpc_support import (
    config,
    make_message,
    now_seconds,
    receive,
    running,
)
from tests.support import BrokerLiteServer

pytestmark = pytest.mark.grpc


@pytest.mark.timeout(60)
def test_normal_messages_are_received_and_acked_exactly_once(grpc_broker: BrokerLiteServer
                                                             ) -> None:
    cfg = config(grpc_broker.grpc)
    with running(Producer(cfg, ("Orders",))) as producer:
        receipts = [producer.send(make_message(
            "Orders", f"order {i}", tag="created", keys=[f"order-{i}"],
            properties={"shop": "north", "n": str(i)})) for i in range(20)]
    sent_ids = {r.message_id for r in receipts}
    assert len(sent_ids) == 20

    consumer = SimpleConsumer(cfg, "billing", {"Orders": FilterExpression("*")},
                              await_duration=1)
    with running(consumer):
        got = receive(consumer, 20)
        assert consumer.receive(16, 10) == []  # all acked: nothing comes back
    assert sorted(m.message_id for m in got) == sorted(sent_ids)
    first = next(m for m in got if m.body == b"order 7")
    assert first.tag == "created"
    assert first.keys == {"order-7"}
    assert first.properties == {"shop": "north", "n": "7"}
    assert first.delivery_attempt == 1
    assert first.topic == "Orders"


@pytest.mark.timeout(60)
def test_tag_filter_skips_other_tags(grpc_broker: BrokerLiteServer) -> None:
    cfg = config(grpc_broker.grpc)
    with running(Producer(cfg, ("Mixed",))) as producer:
        for i in range(10):
            producer.send(make_message("Mixed", f"m{i}", tag="keep" if i % 2 else "drop"))
    consumer = SimpleConsumer(cfg, "filtered", {"Mixed": FilterExpression("keep")},
                              await_duration=1)
    with running(consumer):
        got = receive(consumer, 5)
        assert consumer.receive(16, 10) == []
    assert sorted(m.body for m in got) == [b"m1", b"m3", b"m5", b"m7", b"m9"]


@pytest.mark.timeout(60)
def test_fifo_messages_of_a_group_come_in_send_order(grpc_broker: BrokerLiteServer) -> None:
    cfg = config(grpc_broker.grpc)
    groups = ["alice", "bob", "carol"]
    with running(Producer(cfg, ("Fifo",))) as producer:
        for i in range(30):
            group = groups[i % 3]
            producer.send(make_message("Fifo", f"{group}-{i}", group=group))
    consumer = SimpleConsumer(cfg, "fifo-readers", {"Fifo": FilterExpression()},
                              await_duration=1)
    with running(consumer):
        got = receive(consumer, 30)
    by_group: dict[str, list[int]] = defaultdict(list)
    for msg in got:
        assert msg.message_group == msg.body.decode().split("-")[0]
        by_group[msg.message_group].append(int(msg.body.decode().split("-")[1]))
    for group in groups:
        assert by_group[group] == sorted(by_group[group]), group
        assert len(by_group[group]) == 10


@pytest.mark.timeout(60)
def test_delay_message_is_not_received_before_its_delivery_time(
        grpc_broker: BrokerLiteServer) -> None:
    cfg = config(grpc_broker.grpc)
    deliver_at = now_seconds() + 3
    consumer = SimpleConsumer(cfg, "patient", {"Later": FilterExpression()}, await_duration=1)
    with running(Producer(cfg, ("Later",))) as producer, running(consumer):
        producer.send(make_message("Later", "wake up", deliver_at=deliver_at))
        producer.send(make_message("Later", "now"))
        assert [m.body for m in receive(consumer, 1)] == [b"now"]
        late = receive(consumer, 1, timeout=15)
        seen_at = time.time()
    assert [m.body for m in late] == [b"wake up"]
    assert seen_at >= deliver_at


@pytest.mark.timeout(60)
def test_a_body_of_the_largest_allowed_size_goes_through(grpc_broker: BrokerLiteServer) -> None:
    body = bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB: --max-message-size's default
    cfg = config(grpc_broker.grpc)
    consumer = SimpleConsumer(cfg, "bulk", {"Bulk": FilterExpression()}, await_duration=1)
    with running(Producer(cfg, ("Bulk",))) as producer, running(consumer):
        sent = producer.send(make_message("Bulk", body))
        (got,) = receive(consumer, 1)
    assert got.message_id == sent.message_id and got.body == body and not got.corrupted
