"""Pop-style consumption with the official client: invisibility, redelivery, DLQ, push.

The broker runs with ``--grpc-max-delivery-attempts 3``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
)
from rocketmq.grpc_protocol import Code
from rocketmq.v5.exception import BadRequestException

from tests.broker_lite.grpc_door.grpc_support import (
    config,
    make_message,
    receive,
    running,
    send_bodies,
    simple_consumer,
)
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.grpc


@pytest.mark.timeout(60)
def test_unacked_message_comes_back_after_its_invisible_duration(
        grpc_broker: BrokerLiteServer) -> None:
    (sent,) = send_bodies(grpc_broker.grpc, "Jobs", "job-1")
    with running(simple_consumer(grpc_broker.grpc, "workers", "Jobs")) as consumer:
        (first,) = receive(consumer, 1, invisible=1, ack=False)
        first_at = time.monotonic()
        (second,) = receive(consumer, 1, invisible=10, ack=False)
        assert time.monotonic() - first_at >= 0.9
        assert (first.message_id, second.message_id) == (sent, sent)
        assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
        assert first.receipt_handle != second.receipt_handle
        with pytest.raises(BadRequestException) as stale:
            consumer.ack(first)  # that delivery is over: its handle is stale
        assert stale.value.code == Code.INVALID_RECEIPT_HANDLE
        consumer.ack(second)
        assert consumer.receive(16, 1) == [] and consumer.receive(16, 1) == []


@pytest.mark.timeout(60)
def test_change_invisible_duration_postpones_and_renews_the_handle(
        grpc_broker: BrokerLiteServer) -> None:
    send_bodies(grpc_broker.grpc, "Slow", "long job")
    with running(simple_consumer(grpc_broker.grpc, "slow-workers", "Slow")) as consumer:
        (msg,) = receive(consumer, 1, invisible=1, ack=False)
        old_handle = msg.receipt_handle
        consumer.change_invisible_duration(msg, 3)
        changed_at = time.monotonic()
        assert msg.receipt_handle != old_handle  # the client keeps the new one
        # hidden until the new 3 s run out, not the first 1 s: whenever it comes back (a
        # busy machine may call receive late), it is never handed out before then
        early = consumer.receive(16, 10)
        assert early == [] or time.monotonic() - changed_at >= 2.9, "shown before 3 s"
        (again,) = early or receive(consumer, 1, invisible=10, ack=False)
        assert time.monotonic() - changed_at >= 2.9
        assert again.message_id == msg.message_id and again.delivery_attempt == 2
        consumer.ack(again)


@pytest.mark.timeout(60)
def test_message_goes_to_the_dlq_after_max_delivery_attempts(
        grpc_broker: BrokerLiteServer) -> None:
    (sent,) = send_bodies(grpc_broker.grpc, "Poison", "bad input")
    attempts: list[int] = []
    with running(simple_consumer(grpc_broker.grpc, "fragile", "Poison")) as consumer:
        for _ in range(3):  # never acked: delivered 1 + 2 times, then dead-lettered
            (msg,) = receive(consumer, 1, invisible=1, ack=False)
            assert msg.message_id == sent
            attempts.append(msg.delivery_attempt)
        assert consumer.receive(16, 10) == [] and consumer.receive(16, 10) == []
    assert attempts == [1, 2, 3]
    with running(simple_consumer(grpc_broker.grpc, "janitors", "%DLQ%fragile")) as dlq:
        (dead,) = receive(dlq, 1)
    assert (dead.message_id, dead.body, dead.topic) == (sent, b"bad input", "%DLQ%fragile")


class Listener(MessageListener):
    """Fails the first delivery of every message whose body ends in '!'."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.deliveries: list[tuple[str, int]] = []

    def consume(self, message: Message) -> ConsumeResult:
        body = message.body.decode()
        with self._lock:
            self.deliveries.append((body, message.delivery_attempt))
        if body.endswith("!") and message.delivery_attempt == 1:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

    def successes(self) -> Counter[str]:
        with self._lock:
            return Counter(body for body, attempt in self.deliveries
                           if not (body.endswith("!") and attempt == 1))


@pytest.mark.timeout(90)
def test_push_consumer_consumes_a_stream_and_retries_a_failure(
        grpc_broker: BrokerLiteServer) -> None:
    bodies = [f"event-{i}" for i in range(60)] + ["retry me!"]
    listener = Listener()
    consumer = PushConsumer(config(grpc_broker.grpc), "pushers", listener,
                            {"Events": FilterExpression()}, consumption_thread_count=4)
    with running(Producer(config(grpc_broker.grpc), ("Events",))) as producer, \
            running(consumer):
        for body in bodies:
            producer.send(make_message("Events", body))
        wait_until(lambda: set(listener.successes()) == set(bodies), timeout=30,
                   message=lambda: f"{len(listener.successes())} of {len(bodies)} consumed")
    successes = listener.successes()
    assert all(count == 1 for count in successes.values()), successes.most_common(3)
    assert ("retry me!", 1) in listener.deliveries and ("retry me!", 2) in listener.deliveries
