"""Long polling: a PULL with nothing new waits until a message arrives or its deadline.

RocketMQ holds such pulls in a ``PullRequestHoldService`` and wakes them when
the ``MessageArrivingListener`` fires. Here :class:`ArrivalHub` keeps, per
``(topic, queue_id)``, the futures of the pulls waiting on it
(:class:`~broker_lite.serving.waiters.KeyedWaiters`). The broker calls
:meth:`ArrivalHub.notify` from whatever thread wrote the message; the hub
hands the wake-up to the event loop thread-safely and only when someone is
waiting, so a busy producer costs nothing when no consumer waits.

The race between "pull found nothing" and "start waiting" is closed by
registering the waiter first and checking again after.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec

from broker_lite.core.model import NO_NEW_MESSAGE, PullQuery, PullResult
from broker_lite.serving.waiters import KeyedWaiters

if TYPE_CHECKING:
    from broker_lite.core import Broker

__all__ = ["ArrivalHub", "long_poll_pull"]

_Key = tuple[str, int]


class ArrivalHub(KeyedWaiters[tuple[str, int]]):
    """Wakes the pulls waiting on a queue, keyed ``(topic, queue_id)``, when a message
    becomes visible in it."""

    def notify(self, topic: str, queue_id: int) -> None:
        """The broker's arrival listener (any thread): a message became visible here."""
        self.wake((topic, queue_id))

    def waiting(self, topic: str, queue_id: int) -> int:
        """How many pulls wait on this queue now (for tests and diagnostics)."""
        return self.count((topic, queue_id))


async def long_poll_pull(broker: Broker, hub: ArrivalHub, query: PullQuery,
                         wait_ms: int) -> PullResult:
    """Pull; when nothing is new, wait up to ``wait_ms`` (the door caps it) and pull again.

    A pull that only skipped messages filtered out by its tag expression goes
    on waiting from the advanced offset; the result carries that offset.
    """
    result = broker.pull(query)
    if result.status != NO_NEW_MESSAGE or wait_ms <= 0:
        return result
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    topic, queue_id = query.topic, query.queue_id
    while True:
        if result.next_offset > query.offset:
            query = msgspec.structs.replace(query, offset=result.next_offset)
        future = hub.register((topic, queue_id))
        try:
            if not broker.has_new(topic, queue_id, query.offset):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return result
                try:
                    await asyncio.wait_for(future, remaining)
                except TimeoutError:
                    return broker.pull(query)
        finally:
            hub.unregister((topic, queue_id), future)
        result = broker.pull(query)
        if result.status != NO_NEW_MESSAGE:
            return result
