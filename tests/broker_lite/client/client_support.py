"""Helpers for the client tests: collect messages, record what listeners saw."""

from __future__ import annotations

from collections.abc import Callable

from broker_lite.client import PullConsumer, ReceivedMessage
from tests import support
from tests.support import wait_until
from tests.support.recorder import Recorder as Recorder  # re-exported

__all__ = ["FAST_BROKER", "Recorder", "StartBroker", "drain"]

#: ``serve`` flags that keep waits short: retries in ~0.1 s, check-backs after ~1 s
FAST_BROKER = ("--delay-time-scale", "0.01", "--tx-timeout", "1", "--tx-check-interval", "0.5")

#: the ``start_broker`` fixture: ``start_broker(*extra_args, data_dir=None)``
StartBroker = support.StartBroker


def drain(consumer: PullConsumer, topic: str, count: int, *, timeout: float = 15.0,
          ack: bool = True,
          until: Callable[[list[ReceivedMessage]], bool] | None = None) -> list[ReceivedMessage]:
    """Pull every queue of ``topic`` from the group's offsets until ``count`` messages came
    (or until ``until(messages)`` holds)."""
    queues: list[int] = []
    offsets: dict[int, int] = {}
    got: list[ReceivedMessage] = []

    def more() -> bool:
        if not queues:  # the topic may not exist yet (a DLQ appears with its first message)
            queues.extend(consumer.assignment(topic))
            offsets.update({q: max(consumer.committed_offset(topic, q), 0) for q in queues})
        for queue_id in queues:
            result = consumer.pull(topic, queue_id, offsets[queue_id], 64)
            offsets[queue_id] = result.next_offset
            got.extend(result.messages)
            if ack:
                consumer.ack(result.messages)
        return until(got) if until is not None else len(got) >= count

    wait_until(more, timeout=timeout, message=lambda: f"{len(got)} of {count} messages came")
    return got
