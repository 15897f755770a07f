"""The lifecycle every sync client shares: its asyncio twin on a background loop.

``Producer``, ``PullConsumer``, ``PushConsumer`` and ``Admin`` each wrap an
asyncio client. :class:`SyncClient` runs that client's ``start()`` and
``shutdown()`` on a :class:`LoopThread` of its own, and gives the context
manager, the ``client_id`` and the "not started" error once, for all of them;
:class:`GroupSyncClient` adds the ``group`` of a producer or consumer.
"""

from __future__ import annotations

from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar

from broker_lite.client.config import ClientConfig
from broker_lite.client.errors import ClientClosedError
from broker_lite.client.loop_thread import LoopThread

__all__ = ["AsyncGroupLifecycle", "AsyncLifecycle", "GroupSyncClient", "SyncClient"]


class AsyncLifecycle(Protocol):
    """What a sync client uses of the asyncio client it wraps."""

    @property
    def config(self) -> ClientConfig: ...

    @property
    def client_id(self) -> str: ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


class AsyncGroupLifecycle(AsyncLifecycle, Protocol):
    """An asyncio client of one producer or consumer group."""

    @property
    def group(self) -> str: ...


A = TypeVar("A", bound=AsyncLifecycle)
G = TypeVar("G", bound=AsyncGroupLifecycle)


class SyncClient(Generic[A]):
    """Base of the sync clients. Subclasses set ``_async`` and name their loop."""

    _async: A  # the asyncio twin
    _loop: LoopThread | None = None
    #: what the "not started" error calls this client
    _kind = "client"

    @property
    def client_id(self) -> str:
        return self._async.client_id

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


class GroupSyncClient(SyncClient[G]):
    """A sync client of one group; its loop thread is named ``{_loop_prefix}-{group}``."""

    _loop_prefix = "broker-lite"

    @property
    def group(self) -> str:
        return self._async.group

    def _loop_name(self) -> str:
        return f"{self._loop_prefix}-{self.group}"
