"""Consumers over loopback: the retry schedule into the DLQ, and per-key order."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from broker_lite.client import (
    ConsumeResult,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
)
from broker_lite.core.schedule import DELAY_LEVELS_MS
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.timeout(120)
SCALE = 0.0003  # 2 h becomes 2.16 s; the whole 16-step schedule about 5 s


@pytest.mark.parametrize("broker_lite_server", [("--delay-time-scale", str(SCALE))],
                         indirect=True)
def test_always_failing_listener_sees_1_plus_16_deliveries_then_dlq(
    broker_lite_server: BrokerLiteServer,
) -> None:
    server = broker_lite_server.native
    seen: list[tuple[int, float]] = []
    lock = threading.Lock()

    def fail(msg: ReceivedMessage) -> ConsumeResult:
        assert msg.topic == "Jobs" and msg.body == b"poison"
        with lock:
            seen.append((msg.reconsume_times, time.monotonic()))
        return ConsumeResult.RECONSUME_LATER

    consumer = PushConsumer("workers", server, listener=fail, long_poll_ms=500,
                            rebalance_interval=0.5)
    consumer.subscribe("Jobs")
    with consumer, Producer("jobs", server) as producer:
        msg_id = producer.send(Message("Jobs", b"poison", keys="job-1")).msg_id
        with PullConsumer("dlq-reader", server) as puller:
            dead = wait_until(lambda: puller.pull("%DLQ%workers", 0, 0, 10).messages,
                              timeout=90, message="message in %DLQ%workers")
    assert [r for r, _t in seen] == list(range(17)), "1 delivery + 16 retries, in order"
    gaps = [b - a for (_ra, a), (_rb, b) in itertools.pairwise(seen)]
    for retry, gap in enumerate(gaps):
        level = 3 + retry  # 10 s, 30 s, 1 min ... 2 h, scaled
        assert gap >= DELAY_LEVELS_MS[level - 1] * SCALE / 1000 * 0.9, (retry, gap)
    [message] = dead
    assert message.msg_id == msg_id and message.body == b"poison"
    assert message.properties["RETRY_TOPIC"] == "Jobs"


def test_same_sharding_key_is_consumed_in_send_order(broker_lite_server: BrokerLiteServer) -> None:
    server = broker_lite_server.native
    got: dict[str, list[int]] = {}
    lock = threading.Lock()

    def take(msg: ReceivedMessage) -> ConsumeResult:
        customer, seq = msg.body.decode().split(":")
        with lock:
            got.setdefault(customer, []).append(int(seq))
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("ordered", server, listener=take, orderly=True, long_poll_ms=500,
                            consume_threads=8)
    consumer.subscribe("Ledger")
    with consumer, Producer("ledger", server) as producer:
        for seq in range(100):
            for c in range(6):
                producer.send(Message("Ledger", f"c{c}:{seq}".encode(),
                                      sharding_key=f"customer-{c}"))
        wait_until(lambda: sum(len(v) for v in got.values()) >= 600, timeout=60,
                   message="all 600 consumed")
    assert sorted(got) == [f"c{c}" for c in range(6)]
    for customer, seqs in got.items():
        assert seqs == list(range(100)), f"{customer} out of order"
