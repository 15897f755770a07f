"""Futures waiting on a key, woken from any thread: what both doors' long polls wait on.

A pull of the native door waits on its queue (:class:`~broker_lite.serving.ArrivalHub`),
a receive of the gRPC door on its topic (``grpc_door.door.Waker``). Either
registers a future on the event loop, re-checks for news, then awaits it; the
broker's arrival listener, on whatever thread wrote the message, wakes every
future of the key. Waking costs one dict lookup when nobody waits, and hands
the wake-up to the loop thread-safely when it is called from another thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["KeyedWaiters"]

K = TypeVar("K", bound=Hashable)


class KeyedWaiters(Generic[K]):
    """The futures waiting on each key; :meth:`wake` completes all of a key's at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._waiters: dict[K, set[asyncio.Future[None]]] = {}

    def register(self, key: K) -> asyncio.Future[None]:
        """A future completed at the next :meth:`wake` of ``key``; call in the loop."""
        future: asyncio.Future[None] = self._loop.create_future()
        self._waiters.setdefault(key, set()).add(future)
        return future

    def unregister(self, key: K, future: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(key)
        if waiters is None:
            return
        waiters.discard(future)
        if not waiters:
            del self._waiters[key]

    def wake(self, key: K) -> None:
        """Wake ``key``'s futures; from any thread."""
        # A plain dict lookup is atomic under the GIL; a waiter registered just after
        # this check re-checks for news itself, so nothing is missed.
        if key not in self._waiters:
            return
        if threading.get_ident() == self._loop_thread:
            self.wake_now(key)
            return
        # RuntimeError: the loop is closed, so nobody is waiting any more
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self.wake_now, key)

    def wake_now(self, key: K) -> None:
        """Wake ``key``'s futures; from the loop's thread."""
        for future in self._waiters.pop(key, ()):
            if not future.done():
                future.set_result(None)

    def count(self, key: K) -> int:
        """How many futures wait on ``key`` now (for tests and diagnostics)."""
        return len(self._waiters.get(key, ()))
