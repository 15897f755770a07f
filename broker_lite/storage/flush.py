"""Flushing the commit log: periodic (``async``) or group commit (``sync``).

One background thread owns every ``fdatasync`` of the log.

* ``async``: it flushes every ``interval`` seconds. An append is acknowledged
  once it is copied into the page cache.
* ``sync``: an appender asks for its end offset to be made durable and waits
  (or registers a callback, for asyncio servers). The thread takes the current
  write position, runs one ``fdatasync`` and releases every waiter at or below
  that position: concurrent appenders share one fsync, and there is never an
  fsync per record.

Both modes also run a checkpoint hook at most every ``checkpoint_interval``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["FlushMode", "FlushService"]

FlushMode = Literal["async", "sync"]
log = logging.getLogger("broker_lite.storage.flush")


class FlushService:
    """The flusher thread and the waiters on it."""

    def __init__(
        self,
        *,
        mode: FlushMode,
        flush: Callable[[], int],
        checkpoint: Callable[[], None],
        interval: float = 0.5,
        checkpoint_interval: float = 1.0,
    ) -> None:
        self.mode = mode
        self._flush = flush
        self._checkpoint = checkpoint
        self._interval = interval
        self._checkpoint_interval = checkpoint_interval
        self._cond = threading.Condition()
        self._requested = 0
        self._flushed = 0
        self._callbacks: list[tuple[int, Callable[[BaseException | None], None]]] = []
        self._error: BaseException | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="broker-lite-flush", daemon=True)
        self.fsync_count = 0

    def start(self, flushed: int) -> None:
        self._flushed = self._requested = flushed
        self._thread.start()

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def request(self, end_offset: int) -> None:
        """Ask for everything below ``end_offset`` to be made durable soon."""
        with self._cond:
            if end_offset > self._requested:
                self._requested = end_offset
                self._cond.notify_all()

    def wait(self, end_offset: int, timeout: float | None = None) -> bool:
        """Block until ``end_offset`` is durable; ``False`` on timeout.

        Raises the error the flusher met, if ``fdatasync`` failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if end_offset > self._requested:
                self._requested = end_offset
                self._cond.notify_all()
            while self._flushed < end_offset:
                if self._error is not None:
                    raise self._error
                if self._stopping and not self._thread.is_alive():
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def when_flushed(
        self, end_offset: int, callback: Callable[[BaseException | None], None]
    ) -> None:
        """Call ``callback(None)`` from the flusher thread once durable (or with the error)."""
        with self._cond:
            if self._error is not None:
                error: BaseException | None = self._error
            elif self._flushed >= end_offset:
                error = None
            else:
                self._callbacks.append((end_offset, callback))
                if end_offset > self._requested:
                    self._requested = end_offset
                    self._cond.notify_all()
                return
        callback(error)

    def _run(self) -> None:
        last_checkpoint = time.monotonic()
        while True:
            with self._cond:
                if self.mode == "sync":
                    while not self._stopping and self._requested <= self._flushed:
                        self._cond.wait(self._checkpoint_interval)
                        if time.monotonic() - last_checkpoint >= self._checkpoint_interval:
                            break
                else:
                    self._cond.wait(self._interval)
                stopping = self._stopping
            try:
                flushed = self._flush()
                self.fsync_count += 1
                error: BaseException | None = None
            except BaseException as exc:  # reported to every waiter
                log.exception("commit log flush failed")
                flushed, error = self._flushed, exc
            with self._cond:
                self._flushed = max(self._flushed, flushed)
                self._error = error
                ready = [cb for off, cb in self._callbacks if off <= self._flushed or error]
                self._callbacks = [
                    (off, cb) for off, cb in self._callbacks if off > self._flushed and not error
                ]
                self._cond.notify_all()
            for cb in ready:
                cb(error)
            now = time.monotonic()
            if error is None and (stopping or now - last_checkpoint >= self._checkpoint_interval):
                last_checkpoint = now
                try:
                    self._checkpoint()
                except Exception:
                    log.exception("checkpoint failed")
            if stopping:
                return

    def stop(self) -> None:
        """Flush once more, checkpoint, and end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
