"""A thread pool with a bounded queue, for transaction check-backs.

RocketMQ runs check-backs on a pool of ``checkThreadPoolMinSize`` ..
``checkThreadPoolMaxSize`` threads fed by a queue of ``checkRequestHoldMax``
(2000) requests. :class:`concurrent.futures.ThreadPoolExecutor` has an
unbounded queue, so this is a small pool of its own: ``min_threads`` start
at once, more start (up to ``max_threads``) while work waits and nobody is
idle, extra threads exit after ``keep_alive`` idle seconds, and
:meth:`submit` raises :class:`PoolFullError` instead of queueing past
``queue_size``.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from broker_lite.errors import BrokerBusyError, ConfigurationError

__all__ = ["BoundedThreadPool", "PoolFullError"]

T = TypeVar("T")

_Work = tuple[concurrent.futures.Future[Any], Callable[..., Any], tuple[Any, ...]]


class PoolFullError(BrokerBusyError):
    """Every thread is busy and the queue is full; the request was not taken."""


class BoundedThreadPool:
    def __init__(self, *, min_threads: int = 1, max_threads: int = 1, queue_size: int = 2000,
                 name: str = "pool", keep_alive: float = 60.0) -> None:
        if min_threads < 1 or max_threads < min_threads:
            raise ConfigurationError(f"need 1 <= min_threads <= max_threads, got {min_threads}, "
                                     f"{max_threads}", setting="min_threads, max_threads")
        if queue_size < 1:
            raise ConfigurationError(f"queue_size must be >= 1, got {queue_size}",
                                     setting="queue_size")
        self.min_threads = min_threads
        self.max_threads = max_threads
        self.queue_size = queue_size
        self.name = name
        self.keep_alive = keep_alive
        self._queue: queue.Queue[_Work | None] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        #: one token per worker waiting for work; a submit takes one or starts a thread
        self._idle = threading.Semaphore(0)
        self._counter = 0
        self._shutdown = False
        with self._lock:
            for _ in range(min_threads):
                self._spawn()

    @property
    def threads(self) -> int:
        with self._lock:
            return len(self._threads)

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """Queue ``fn(*args)``; raises PoolFullError when the queue is full."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError(f"{self.name} is shut down")
            try:
                self._queue.put_nowait((future, fn, args))
            except queue.Full:
                raise PoolFullError(
                    f"{self.name}: {self.queue_size} requests already wait for "
                    f"{len(self._threads)} busy threads") from None
            if not self._idle.acquire(blocking=False) and len(self._threads) < self.max_threads:
                self._spawn()
        return future

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Refuse new work, cancel what has not started, stop the threads."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            threads = list(self._threads)
        while True:
            try:
                work = self._queue.get_nowait()
            except queue.Empty:
                break
            if work is not None:
                work[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            self.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the threads to end (after :meth:`shutdown`)."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def _spawn(self) -> None:  # with self._lock held
        self._counter += 1
        thread = threading.Thread(target=self._work, name=f"{self.name}-{self._counter}",
                                  daemon=True)
        self._threads.add(thread)
        thread.start()

    def _work(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                self._idle.release()
                try:
                    work = self._queue.get(timeout=self.keep_alive)
                except queue.Empty:
                    self._idle.acquire(blocking=False)  # take this wait's token back
                    with self._lock:
                        if len(self._threads) > self.min_threads:
                            return
                    continue
                if work is None:
                    return
                future, fn, args = work
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
        finally:
            with self._lock:
                self._threads.discard(me)
