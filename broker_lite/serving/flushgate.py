"""Waiting for durability on the event loop, one thread hop per fsync.

In ``sync`` flush mode a request is answered only once its record is durable.
Each waiting request parks a future here, keyed by its end offset. The store
calls :meth:`FlushGate.on_flushed` on its flusher thread once per
``fdatasync``; that crosses to the loop once and settles every future at or
below the flushed offset. (One ``call_soon_threadsafe`` per record cost a
self-pipe write each and showed up in profiles.)

Asking the flusher is batched too (each ask wakes the flusher thread): the
first wait after a flush asks at once; while that flush is pending, the
waits of one loop turn ask once, at its end, for the highest offset among
them. A wait may have a deadline; one timer sweeps the expired waits
instead of one timer per wait, so a wait ends up to ``_SWEEP_INTERVAL`` late.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math

from broker_lite.errors import ResponseCode, UnavailableError
from broker_lite.storage import MessageStore

__all__ = ["FlushGate", "FlushTimeout"]

#: how often expired waits are looked for (at most), in seconds
_SWEEP_INTERVAL = 0.1


class FlushTimeout(UnavailableError):
    """What a wait resolves to when its deadline passed before the fsync of ``end_offset``."""

    code = ResponseCode.FLUSH_DISK_TIMEOUT

    def __init__(self, *, end_offset: int) -> None:
        super().__init__(f"no fsync of offset {end_offset} before the wait's deadline")
        self.end_offset = end_offset


class FlushGate:
    def __init__(self, store: MessageStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop
        self._waiting: list[tuple[int, int, asyncio.Future[BaseException | None], float]] = []
        self._seq = itertools.count()
        self._flushed = store.flushed_offset
        #: the highest offset waited for, the highest asked of the store, and whether
        #: asking is scheduled
        self._wanted = self._asked = self._flushed
        self._asking = False
        self._sweeper: asyncio.TimerHandle | None = None
        store.add_flush_listener(self.on_flushed)

    def wait(self, end_offset: int,
             timeout: float | None = None) -> asyncio.Future[BaseException | None]:
        """A future set (to the flush error, or ``None``) once ``end_offset`` is durable.

        With ``timeout``, it is set to a :class:`FlushTimeout` if that takes
        longer than ``timeout`` seconds (give or take the sweep interval).
        """
        future: asyncio.Future[BaseException | None] = self._loop.create_future()
        if end_offset <= self._flushed or self._store.flushed_offset >= end_offset:
            future.set_result(None)
            return future
        deadline = math.inf if timeout is None else self._loop.time() + timeout
        heapq.heappush(self._waiting, (end_offset, next(self._seq), future, deadline))
        if end_offset > self._wanted:
            self._wanted = end_offset
            if self._asked <= self._store.flushed_offset:
                # the flusher has done all it was asked (it may have finished a moment
                # ago, before this loop settled it): wake it now, not at the end of a
                # turn that may last a while
                self._ask()
            elif not self._asking:  # it is busy: ask once, for the rest of this loop turn
                self._asking = True
                self._loop.call_soon(self._ask)
        if timeout is not None and self._sweeper is None:
            self._sweeper = self._loop.call_later(min(timeout, _SWEEP_INTERVAL), self._sweep)
        return future

    def _ask(self) -> None:
        self._asking = False
        self._asked = self._wanted
        self._store.request_flush(self._wanted)

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
            future = heapq.heappop(waiting)[2]
            if not future.done():
                future.set_result(error)

    def _sweep(self) -> None:
        """Resolve the waits whose deadline passed; come back while any has a deadline."""
        self._sweeper = None
        now = self._loop.time()
        pending = False
        for end, _seq, future, deadline in self._waiting:
            if future.done() or deadline == math.inf:
                continue
            if deadline <= now:
                future.set_result(FlushTimeout(end_offset=end))
            else:
                pending = True
        if pending:
            self._sweeper = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)
