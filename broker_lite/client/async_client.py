"""The ``async with`` every asyncio client shares: ``start()`` on entry, ``shutdown()`` on exit.

:class:`~broker_lite.client.session.SessionClient` (producers, the pull
consumer, admin) and :class:`~broker_lite.client.push_consumer.AsyncPushConsumer`
derive from :class:`AsyncClient`; the sync twins have the same in
:mod:`broker_lite.client.sync_client`.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncClient"]


class AsyncClient:
    """Base of the asyncio clients: ``async with client:`` starts it and shuts it down."""

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.shutdown()
