"""Long polling: a PULL with nothing new waits until a message arrives or its deadline.

RocketMQ holds such pulls in a ``PullRequestHoldService`` and wakes them when
the ``MessageArrivingListener`` fires. Here :class:`ArrivalHub` keeps, per
``(topic, queue_id)``, the futures of the pulls waiting on it. The broker calls
:meth:`ArrivalHub.notify` from whatever thread wrote the message; the hub
hands the wake-up to the event loop thread-safely and only when someone is
waiting, so a busy producer costs nothing when no consumer waits.

The race between "pull found nothing" and "start waiting" is closed by
registering the waiter first and checking again after.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING

import msgspec

from broker_lite.core.model import NO_NEW_MESSAGE, PullQuery, PullResult

if TYPE_CHECKING:
    from broker_lite.core import Broker

__all__ = ["ArrivalHub", "long_poll_pull"]

_Key = tuple[str, int]


class ArrivalHub:
    """Wakes the pulls waiting on a queue when a message becomes visible in it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[_Key, set[asyncio.Future[None]]] = {}

    def notify(self, topic: str, queue_id: int) -> None:
        """Called by the broker (any thread) after a message became visible in a queue."""
        key = (topic, queue_id)
        # A plain dict lookup is atomic under the GIL; a waiter registered just
        # after this check re-checks the queue itself, so nothing is missed.
        if key not in self._waiters:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(key)
            return
        # RuntimeError: the loop is closed, so nobody is waiting any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake, key)

    def waiting(self, topic: str, queue_id: int) -> int:
        """How many pulls wait on this queue now (for tests and diagnostics)."""
        return len(self._waiters.get((topic, queue_id), ()))

    def register(self, topic: str, queue_id: int) -> asyncio.Future[None]:
        """A future that completes at the next arrival on the queue; call in the loop."""
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiters.setdefault((topic, queue_id), set()).add(future)
        return future

    def unregister(self, topic: str, queue_id: int, future: asyncio.Future[None]) -> None:
        key = (topic, queue_id)
        waiters = self._waiters.get(key)
        if waiters is None:
            return
        waiters.discard(future)
        if not waiters:
            del self._waiters[key]

    def _wake(self, key: _Key) -> None:
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)


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
        future = hub.register(topic, queue_id)
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
            hub.unregister(topic, queue_id, future)
        result = broker.pull(query)
        if result.status != NO_NEW_MESSAGE:
            return result
