"""An asyncio event loop running in a background daemon thread.

The sync clients are thin facades over the asyncio ones: each owns one
:class:`LoopThread`, submits coroutines to it with
:func:`asyncio.run_coroutine_threadsafe` and waits for the result.
:meth:`LoopThread.stop` cancels what is left, stops the loop and joins the
thread, so a shut-down client leaves no thread behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from broker_lite.client.errors import ClientClosedError

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """One event loop, one daemon thread; started on construction."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            with contextlib.suppress(RuntimeError):
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopped

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a thread-safe future."""
        with self._lock:
            if self._stopped:
                coro.close()
                raise ClientClosedError("the client is shut down")
            return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (or exception).

        Must not be called from the loop's own thread (that would deadlock).
        """
        if self.in_loop_thread:
            coro.close()
            raise RuntimeError("a sync client method was called on its own event loop; "
                               "use the asyncio client there")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:
            raise ClientClosedError("the client was shut down during the call") from None
        except BaseException:
            future.cancel()
            raise

    def call_soon(self, callback: Callable[..., object], *args: object) -> None:
        """Run ``callback(*args)`` on the loop, from any thread."""
        with self._lock:
            if not self._stopped:
                self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel remaining tasks, stop the loop and join the thread. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self.in_loop_thread:
            raise RuntimeError("LoopThread.stop() called from its own loop")
        if self._thread.is_alive():
            with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
                asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout)
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)


async def _cancel_all() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
