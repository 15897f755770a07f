"""PushConsumer against a real broker: delivery, retry, DLQ, rebalance, order, shutdown.

The ``broker`` fixture scales delays by 0.01, so a retry comes back in ~0.1 s.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import pytest

from broker_lite.client import (
    Admin,
    AsyncPushConsumer,
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    dlq_topic,
)
from tests.broker_lite.client.client_support import Recorder, drain
from tests.support import BrokerLiteServer, wait_until

FAST = {"rebalance_interval": 0.3, "long_poll_ms": 20_000}


def _create(broker: BrokerLiteServer, topic: str) -> None:
    """Topics exist before consumers subscribe (subscribing does not create one)."""
    with Admin(broker.native) as admin:
        admin.create_topic(topic, queues=4)


def _send(broker: BrokerLiteServer, topic: str, bodies: list[str], **kw: object) -> None:
    with Producer("pg", broker.native) as producer:
        for body in bodies:
            producer.send(Message(topic, body, **kw))


@pytest.mark.timeout(60)
def test_push_consumer_delivers_and_acks(broker: BrokerLiteServer) -> None:
    threads_before = set(threading.enumerate())
    recorder = Recorder()
    _create(broker, "Orders")
    consumer = PushConsumer("cg", broker.native, listener=recorder, **FAST)
    consumer.subscribe("Orders")
    consumer.start()
    try:
        assert consumer.assigned_queues()["Orders"] == [0, 1, 2, 3]
        _send(broker, "Orders", [f"m{i}" for i in range(20)], tags="new")
        wait_until(lambda: recorder.count() >= 20, timeout=15)
        started = time.monotonic()
    finally:
        consumer.shutdown()
    assert time.monotonic() - started < 5, "shutdown waited out a long poll"
    assert sorted(recorder.bodies()) == sorted(f"m{i}".encode() for i in range(20))
    assert all(m.topic == "Orders" and m.tags == "new" for m in recorder.seen)
    assert set(threading.enumerate()) <= threads_before
    with PullConsumer("cg", broker.native) as check:
        assert sum(check.committed_offset("Orders", q) for q in range(4)) == 20


@pytest.mark.timeout(60)
def test_retry_then_success_counts_reconsume_times(broker: BrokerLiteServer) -> None:
    def decide(msg: ReceivedMessage) -> ConsumeResult:
        if msg.body == b"exception" and msg.reconsume_times == 0:
            raise RuntimeError("first try fails")
        if msg.body == b"flaky" and msg.reconsume_times < 2:
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    recorder = Recorder(decide)
    with PushConsumer("cg", broker.native, listener=recorder, **FAST) as consumer:
        consumer.subscribe("Orders")
        _send(broker, "Orders", ["flaky", "exception", "fine"], keys="k")
        wait_until(lambda: recorder.count() >= 6, timeout=20, message=lambda: "deliveries: "
                   f"{[(m.body, m.reconsume_times) for m in recorder.seen]}")
    flaky = [m for m in recorder.seen if m.body == b"flaky"]
    assert [m.reconsume_times for m in flaky] == [0, 1, 2]
    assert len({m.msg_id for m in flaky}) == 1  # the same message, redelivered
    assert all(m.topic == "Orders" and m.keys == ("k",) for m in flaky)
    assert [m.is_retry for m in flaky] == [False, True, True]
    assert [m.reconsume_times for m in recorder.seen if m.body == b"exception"] == [0, 1]
    assert [m.reconsume_times for m in recorder.seen if m.body == b"fine"] == [0]


@pytest.mark.timeout(60)
def test_message_goes_to_dlq_after_max_reconsume_times(broker: BrokerLiteServer) -> None:
    recorder = Recorder(lambda msg: ConsumeResult.RECONSUME_LATER)
    with PushConsumer("cg", broker.native, listener=recorder, max_reconsume_times=2,
                      **FAST) as consumer:
        consumer.subscribe("Orders")
        _send(broker, "Orders", ["doomed"])
        with PullConsumer("dlq-reader", broker.native) as reader:
            [dead] = drain(reader, dlq_topic("cg"), 1, timeout=20)
    assert [m.reconsume_times for m in recorder.seen] == [0, 1, 2]
    assert dead.body == b"doomed" and dead.msg_id == recorder.seen[0].msg_id


@pytest.mark.timeout(90)
def test_two_consumers_split_queues_and_get_each_message_once(
        broker: BrokerLiteServer) -> None:
    first, second = Recorder(), Recorder()
    _create(broker, "Split")
    a = PushConsumer("shared", broker.native, listener=first, **FAST)
    b = PushConsumer("shared", broker.native, listener=second, **FAST)
    for consumer in (a, b):
        consumer.subscribe("Split")
    a.start()
    b.start()
    try:
        def split() -> bool:
            qa = set(a.assigned_queues().get("Split", []))
            qb = set(b.assigned_queues().get("Split", []))
            return bool(qa) and bool(qb) and not qa & qb and qa | qb == {0, 1, 2, 3}

        wait_until(split, timeout=15, message="the group never split the queues")
        bodies = [f"m{i}" for i in range(200)]
        _send(broker, "Split", bodies)
        wait_until(lambda: first.count() + second.count() >= 200, timeout=20)
    finally:
        a.shutdown()
        b.shutdown()
    every = Counter(first.bodies() + second.bodies())
    assert every == Counter(b.encode() for b in bodies)
    assert first.count() and second.count()
    assert {m.queue_id for m in first.seen}.isdisjoint({m.queue_id for m in second.seen})


@pytest.mark.timeout(60)
def test_orderly_consumer_keeps_order_per_queue_through_retries(
        broker: BrokerLiteServer) -> None:
    failed_once: set[bytes] = set()

    def decide(msg: ReceivedMessage) -> ConsumeResult:
        if msg.body.endswith(b"-3") and msg.body not in failed_once:
            failed_once.add(msg.body)
            return ConsumeResult.RECONSUME_LATER
        return ConsumeResult.SUCCESS

    recorder = Recorder(decide)
    with PushConsumer("ordered", broker.native, listener=recorder, orderly=True,
                      suspend_seconds=0.05, **FAST) as consumer:
        consumer.subscribe("Seq")
        with Producer("pg", broker.native) as producer:
            for i in range(10):
                for key in ("a", "b"):
                    producer.send(Message("Seq", f"{key}-{i}", sharding_key=key))
        wait_until(lambda: recorder.count() >= 22, timeout=20)
    for key in ("a", "b"):
        seen = [m.body.decode() for m in recorder.seen if m.body.startswith(key.encode())]
        assert seen == [f"{key}-{i}" for i in range(4)] + [f"{key}-{i}" for i in range(3, 10)]
    retried = [m for m in recorder.seen if m.body.endswith(b"-3")]
    assert sorted(m.reconsume_times for m in retried) == [0, 0, 1, 1]


@pytest.mark.timeout(60)
def test_tag_filter_and_async_listener(broker: BrokerLiteServer) -> None:
    got: list[ReceivedMessage] = []

    async def main() -> None:
        done = asyncio.Event()

        async def listener(msg: ReceivedMessage) -> ConsumeResult:
            got.append(msg)
            if len(got) >= 2:
                done.set()
            return ConsumeResult.SUCCESS

        consumer = AsyncPushConsumer("tags", broker.native, listener=listener, **FAST)
        consumer.subscribe("Tagged", "keep || also")
        async with consumer:
            await asyncio.to_thread(_send, broker, "Tagged", ["1"], tags="keep")
            await asyncio.to_thread(_send, broker, "Tagged", ["2"], tags="drop")
            await asyncio.to_thread(_send, broker, "Tagged", ["3"], tags="also")
            await asyncio.wait_for(done.wait(), 15)

    asyncio.run(main())
    assert sorted(m.body for m in got) == [b"1", b"3"]


@pytest.mark.timeout(60)
def test_batch_listener_gets_lists(broker: BrokerLiteServer) -> None:
    batches: list[list[ReceivedMessage]] = []
    lock = threading.Lock()

    def listener(msgs: list[ReceivedMessage]) -> ConsumeResult:
        with lock:
            batches.append(msgs)
        return ConsumeResult.SUCCESS

    _send(broker, "Batched", [f"m{i}" for i in range(40)], sharding_key="one-queue")
    with PushConsumer("batched", broker.native, listener=listener, consume_batch_size=10,
                      **FAST) as consumer:
        consumer.subscribe("Batched")
        wait_until(lambda: sum(len(b) for b in batches) >= 40, timeout=15)
    assert all(isinstance(b, list) and 1 <= len(b) <= 10 for b in batches)
    assert max(len(b) for b in batches) > 1


@pytest.mark.timeout(60)
def test_broadcasting_consumers_each_get_every_message(broker: BrokerLiteServer) -> None:
    first, second = Recorder(), Recorder()
    _create(broker, "News")
    consumers = [PushConsumer("radio", broker.native, listener=rec, broadcasting=True, **FAST)
                 for rec in (first, second)]
    for consumer in consumers:
        consumer.subscribe("News")
        consumer.start()
    try:
        for consumer in consumers:
            assert consumer.assigned_queues() == {"News": [0, 1, 2, 3]}
        _send(broker, "News", [f"n{i}" for i in range(12)])
        wait_until(lambda: first.count() >= 12 and second.count() >= 12, timeout=15)
    finally:
        for consumer in consumers:
            consumer.shutdown()
    assert sorted(first.bodies()) == sorted(second.bodies()) == sorted(
        f"n{i}".encode() for i in range(12))
