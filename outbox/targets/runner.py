"""A :class:`~outbox.targets.base.Target` from sync code: one event loop thread per publisher.

:class:`TargetPublisher` is the :class:`~outbox.targets.base.Publisher` the
relay and the Celery tasks use: it starts the target on first use, on an
event loop of its own running in a daemon thread, and waits for each call
with a deadline. :class:`ProcessPublishers` keeps one publisher per process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from outbox.errors import BrokerUnreachableError
from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfThenEnd,
    OutgoingMessage,
    Publisher,
    Target,
    TxEnd,
    TxState,
)

__all__ = ["ProcessPublishers", "TargetPublisher"]

T = TypeVar("T")


class TargetPublisher:
    """The sync face of ``target``: thread-safe, its calls run on one loop thread.

    ``timeout`` (seconds), when given, bounds each call as a whole; without
    it the target's own request deadlines bound it (a broker_lite call may be
    several requests, see :mod:`outbox.targets.broker_lite`). The first call
    starts the target; a start that fails
    leaves the publisher unstarted, so the next call tries again.
    :meth:`on_reconnect` callbacks run on the loop thread.
    """

    def __init__(self, target: Target, *, timeout: float | None = None) -> None:
        self.target = target
        self._timeout = timeout
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever the target's lost connection is back."""
        self.target.on_reconnect(callback)

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        if not messages:
            return []
        return self._call(self.target.send_halves(messages))

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        if not ends:
            return []
        return self._call(self.target.end_transactions(ends))

    def send_and_end(self, messages: Sequence[OutgoingMessage], states: Sequence[TxState]
                     ) -> list[HalfThenEnd] | None:
        """The target's :meth:`~outbox.targets.base.PipelinedTarget.send_and_end`; None for
        a target without it (or no messages): take the two-step way."""
        both = getattr(self.target, "send_and_end", None)
        if both is None or not messages:
            return None
        result: list[HalfThenEnd] | None = self._call(both(messages, states))
        return result

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            loop = self._started()
        except BaseException:
            coro.close()  # never started: nothing to await
            raise
        return self._run(loop, coro)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="rocketbox-target",
                                      daemon=True)
            thread.start()
            try:
                self._run(loop, self.target.start())
            except BaseException:
                _stop(loop, thread)
                raise
            self._loop, self._thread = loop, thread
            return loop

    def _run(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(self._timeout)
        except concurrent.futures.TimeoutError as exc:
            future.cancel()
            raise BrokerUnreachableError(
                f"{self.target.description}: no answer within {self._timeout:g}s") from exc

    def close(self) -> None:
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        try:
            self._run(loop, self.target.close())
        finally:
            _stop(loop, thread)


def _stop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Cancel what is left on ``loop``, stop it, join its thread and close it."""

    async def cancel_rest() -> None:
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(cancel_rest(), loop).result(5.0)
    except (concurrent.futures.TimeoutError, RuntimeError):
        logging.getLogger("rocketbox.relay").warning("the target's loop did not wind down")
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5.0)
    if not thread.is_alive():
        loop.close()


class ProcessPublishers:
    """One publisher per process, made on first use.

    A publisher is thread-safe, so the threads of a process share it; a forked
    child makes its own (the parent's connection and loop thread do not
    survive a fork) and never touches the parent's.
    """

    def __init__(self, make: Callable[[], Publisher]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._by_pid: dict[int, Publisher] = {}

    def get(self) -> Publisher:
        pid = os.getpid()
        with self._lock:
            publisher = self._by_pid.get(pid)
            if publisher is None:
                publisher = self._by_pid[pid] = self._make()
            return publisher

    def close(self) -> None:
        """Close this process's publisher, if it made one (shutdown, tests)."""
        with self._lock:
            publisher = self._by_pid.pop(os.getpid(), None)
            self._by_pid.clear()  # a parent's, inherited by fork: not ours to close
        if publisher is not None:
            try:
                publisher.close()
            except Exception:
                logging.getLogger("rocketbox.outbox").warning(
                    "closing the broker publisher failed", exc_info=True)
