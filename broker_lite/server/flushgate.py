"""Waiting for durability on the event loop, one thread hop per fsync.

In ``sync`` flush mode a request is answered only once its record is durable.
Each waiting request parks a future here, keyed by its end offset. The store
calls :meth:`FlushGate.on_flushed` on its flusher thread once per
``fdatasync``; that crosses to the loop once and settles every future at or
below the flushed offset. (One ``call_soon_threadsafe`` per record cost a
self-pipe write each and showed up in profiles.)
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools

from broker_lite.storage import MessageStore

__all__ = ["FlushGate"]


class FlushGate:
    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop
        self._waiting: list[tuple[int, int, asyncio.Future[BaseException | None]]] = []
        self._seq = itertools.count()
        self._flushed = store.flushed_offset
        store.add_flush_listener(self.on_flushed)

    def wait(self, end_offset: int) -> asyncio.Future[BaseException | None]:
        """A future set (to the flush error, or ``None``) once ``end_offset`` is durable."""
        future: asyncio.Future[BaseException | None] = self._loop.create_future()
        if end_offset <= self._flushed or self._store.flushed_offset >= end_offset:
            future.set_result(None)
            return future
        heapq.heappush(self._waiting, (end_offset, next(self._seq), future))
        self._store.request_flush(end_offset)
        return future

    def on_flushed(self, offset: int, error: BaseException | None) -> None:
        """Flusher thread: hand the news to the loop, once."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            self._loop.call_soon_threadsafe(self._settle, offset, error)

    def _settle(self, offset: int, error: BaseException | None) -> None:
        self._flushed = max(self._flushed, offset)
        waiting = self._waiting
        while waiting and (error is not None or waiting[0][0] <= self._flushed):
            _end, _seq, future = heapq.heappop(waiting)
            if not future.done():
                future.set_result(error)
