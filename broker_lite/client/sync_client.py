"""The lifecycle every sync client shares: its asyncio twin on a background loop.

``Producer``, ``PullConsumer``, ``PushConsumer`` and ``Admin`` each wrap an
asyncio client. :class:`SyncClient` runs that client's ``start()`` and
``shutdown()`` on a :class:`LoopThread` of its own, and gives the context
manager and the "not started" error once, for all of them.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Protocol, Self

from broker_lite.client.config import ClientConfig
from broker_lite.client.errors import ClientClosedError
from broker_lite.client.loop_thread import LoopThread

__all__ = ["AsyncLifecycle", "SyncClient"]


class AsyncLifecycle(Protocol):
    @property
    def config(self) -> ClientConfig: ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


class SyncClient:
    """Base of the sync clients. Subclasses set ``_async`` and name their loop."""

    _async: Any  # the asyncio twin (an AsyncLifecycle)
    _loop: LoopThread | None = None
    #: what the "not started" error calls this client
    _kind = "client"

    def _loop_name(self) -> str:
        return f"broker-lite-{self._kind}"

    def _shutdown_timeout(self) -> float:
        return float(self._async.config.request_timeout) + 5

    def _after_failed_start(self, loop: LoopThread) -> None:
        """Clean up what a failed ``start()`` left on ``loop`` (before it stops)."""

    def start(self) -> None:
        """Connect and register; raises BrokerUnavailableError if the broker is unreachable."""
        if self._loop is not None:
            return
        loop = LoopThread(self._loop_name())
        try:
            loop.run(self._async.start())
        except BaseException:
            try:
                self._after_failed_start(loop)
            finally:
                loop.stop()
            raise
        self._loop = loop

    def shutdown(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.run(self._async.shutdown(), timeout=self._shutdown_timeout())
        finally:
            loop.stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.shutdown()

    def _running(self) -> LoopThread:
        if self._loop is None:
            raise ClientClosedError(f"the {self._kind} is not started (call start())")
        return self._loop
