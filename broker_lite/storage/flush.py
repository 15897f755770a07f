"""Flushing the commit log: periodic (``async``) or group commit (``sync``).

One background thread owns every ``fdatasync`` of the log.

* ``async``: it flushes every ``interval`` seconds. An append is acknowledged
  once it is copied into the page cache.
* ``sync``: an appender asks for its end offset to be made durable and waits
  (or registers a callback, for asyncio servers). The thread takes the current
  write position, runs one ``fdatasync`` and releases every waiter at or below
  that position: concurrent appenders share one fsync, and there is never an
  fsync per record.

Both modes also run a checkpoint hook at most every ``checkpoint_interval``,
and an ``after_flush`` hook after every flush, once its waiters are released
(the store makes the next commit-log segment ahead there).
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
        after_flush: Callable[[], object] | None = None,
    ) -> None:
        self.mode = mode
        self._after_flush = after_flush
        self._flush = flush
        self._checkpoint = checkpoint
        self._interval = interval
        self._checkpoint_interval = checkpoint_interval
        self._lock = threading.Lock()
        # The flusher sleeps on ``_wake``; appenders sleep on the event of the
        # flush generation they wait for, which the flusher sets once per
        # fdatasync. So each waiter wakes once per flush, not once per request.
        # ``_wake`` is a lock used as a one-slot signal, held while no wake-up is
        # pending: ``release`` (C, no Python-level Condition as Event.set runs) is the
        # wake-up, the flusher's ``acquire`` consumes it. Appenders signal once per request.
        self._wake = threading.Lock()
        self._wake.acquire()
        self._generation = threading.Event()
        self._requested = 0
        self._flushed = 0
        self._callbacks: list[tuple[int, Callable[[BaseException | None], None]]] = []
        self._listeners: list[Callable[[int, BaseException | None], None]] = []
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
        with self._lock:
            wake = end_offset > self._requested
            if wake:
                self._requested = end_offset
        if wake:
            self._signal()

    def wait(self, end_offset: int, timeout: float | None = None) -> bool:
        """Block until ``end_offset`` is durable; ``False`` on timeout.

        Raises the error the flusher met, if ``fdatasync`` failed.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self._flushed >= end_offset:
                    return True
                if self._error is not None:
                    raise self._error
                if self._stopping and not self._thread.is_alive():
                    return False
                wake = end_offset > self._requested
                if wake:
                    self._requested = end_offset
                generation = self._generation
            if wake:
                self._signal()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            generation.wait(remaining)

    def when_flushed(
        self, end_offset: int, callback: Callable[[BaseException | None], None]
    ) -> None:
        """Call ``callback(None)`` from the flusher thread once durable (or with the error)."""
        with self._lock:
            error = self._error
            queued = error is None and self._flushed < end_offset
            wake = False
            if queued:
                self._callbacks.append((end_offset, callback))
                wake = end_offset > self._requested
                if wake:
                    self._requested = end_offset
        if wake:
            self._signal()
        if not queued:
            callback(error)

    def add_listener(self, listener: Callable[[int, BaseException | None], None]) -> None:
        """Call ``listener(flushed_offset, error)`` on the flusher thread after every flush.

        One call per ``fdatasync`` however many appends it covered: a server
        resolves all its waiting requests with one hop across threads.
        """
        with self._lock:
            self._listeners.append(listener)

    def _signal(self) -> None:
        """Wake the flusher (or leave it a wake-up if it is busy)."""
        try:  # noqa: SIM105 (suppress() costs a context manager per request)
            self._wake.release()
        except RuntimeError:  # a wake-up is already pending
            pass

    def _run(self) -> None:
        last_checkpoint = time.monotonic()
        while True:
            # consumes the wake-up before reading _requested: no request is missed
            self._wake.acquire(
                timeout=self._checkpoint_interval if self.mode == "sync" else self._interval)
            with self._lock:
                stopping = self._stopping
                needed = self._requested > self._flushed
            due = time.monotonic() - last_checkpoint >= self._checkpoint_interval
            if self.mode == "sync" and not (needed or due or stopping):
                continue
            try:
                flushed = self._flush()
                self.fsync_count += 1
                error: BaseException | None = None
            except BaseException as exc:  # reported to every waiter
                log.exception("commit log flush failed")
                flushed, error = self._flushed, exc
            with self._lock:
                self._flushed = max(self._flushed, flushed)
                self._error = error
                ready = [cb for off, cb in self._callbacks if off <= self._flushed or error]
                self._callbacks = [
                    (off, cb) for off, cb in self._callbacks if off > self._flushed and not error
                ]
                done, self._generation = self._generation, threading.Event()
                listeners = list(self._listeners)
                flushed_now = self._flushed
            done.set()
            for cb in ready:
                cb(error)
            for listener in listeners:
                try:
                    listener(flushed_now, error)
                except Exception:
                    log.exception("flush listener failed")
            if self._after_flush is not None and error is None and not stopping:
                try:
                    self._after_flush()
                except Exception:
                    log.exception("after-flush hook failed")
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
        with self._lock:
            self._stopping = True
        self._signal()
        if self._thread.is_alive():
            self._thread.join()
