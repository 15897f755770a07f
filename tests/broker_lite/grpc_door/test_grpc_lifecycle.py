"""The gRPC door across a broker's life: shutdown with clients connected, and a restart.

The pop state (what was received and not acked) is in memory: after a
restart, unacked messages are delivered again from the group's committed
offset, with their delivery attempt starting over (at least once).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer

from tests.broker_lite.grpc_door.grpc_support import (
    StartGrpcBroker,
    config,
    make_message,
    receive,
    running,
    simple_consumer,
)

pytestmark = pytest.mark.grpc


@pytest.mark.timeout(60)
def test_sigterm_with_clients_connected_exits_cleanly(start_grpc_broker: StartGrpcBroker
                                                      ) -> None:
    with start_grpc_broker() as broker:
        cfg = config(broker.grpc)
        consumer = SimpleConsumer(cfg, "waiting", {"Quiet": FilterExpression()},
                                  await_duration=20)
        with running(Producer(cfg, ("Quiet",))), running(consumer):
            polling = threading.Thread(target=lambda: _swallow(consumer), daemon=True)
            polling.start()  # a 20 s long poll is (most likely) waiting as the broker stops
            assert broker.stop(signal.SIGTERM, timeout=10) == 0
            polling.join(30)
            assert not polling.is_alive()
        log = broker.stderr_text()
    assert "Traceback" not in log and "ERROR" not in log


def _swallow(consumer: SimpleConsumer) -> None:
    with contextlib.suppress(Exception):  # the broker goes away under the long poll
        consumer.receive(1, 5)


@pytest.mark.timeout(90)
def test_unacked_messages_are_delivered_again_after_a_restart(
        start_grpc_broker: StartGrpcBroker, tmp_path: Path) -> None:
    data = tmp_path / "restarting"
    with start_grpc_broker(data_dir=data) as broker:
        cfg = config(broker.grpc)
        with running(Producer(cfg, ("Durable",))) as producer:
            sent = [producer.send(make_message("Durable", f"m{i}", group="one-queue"))
                    .message_id for i in range(3)]
        consumer = SimpleConsumer(cfg, "restarters", {"Durable": FilterExpression()},
                                  await_duration=1)
        with running(consumer):
            (first,) = receive(consumer, 1, ack=True)
            (second,) = receive(consumer, 1, ack=False, invisible=3)
        assert [first.message_id, second.message_id] == sent[:2]
    with start_grpc_broker(data_dir=data) as broker:
        consumer = simple_consumer(broker.grpc, "restarters", "Durable")
        with running(consumer):
            again = receive(consumer, 2)
    assert [m.message_id for m in again] == sent[1:]  # the group's order holds
    # the in-flight one kept its delivery count (pop.json, saved at shutdown)
    assert [m.delivery_attempt for m in again] == [2, 1]
