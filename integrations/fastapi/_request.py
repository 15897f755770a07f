"""What the FastAPI extension and its decorator share: the request's session, and the
shape of the :class:`~integrations.fastapi.Rocketbox` the decorator runs a view with.

:meth:`Rocketbox.session` (:mod:`integrations.fastapi._extension`) binds the
request's ``AsyncSession`` here; the decorator (:mod:`integrations.fastapi._decorator`)
reads it with :func:`request_session`. Both import this module and the
extension imports the decorator, so neither imports the other back.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from outbox.config import Mode, Outbox
from outbox.targets import Publisher

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["Host", "bind_request_session", "request_session"]


class Host(Protocol):
    """What the decorator needs of a :class:`~integrations.fastapi.Rocketbox`."""

    sessions: async_sessionmaker[AsyncSession]
    rollback_on_error_status: bool
    mode: Mode

    @property
    def outbox(self) -> Outbox: ...

    @property
    def celery(self) -> Celery | None: ...

    def publisher(self) -> Publisher: ...


#: the request's session, set by the :meth:`Rocketbox.session` dependency
_request_session: ContextVar[tuple[object, AsyncSession] | None] = ContextVar(
    "rocketbox_request_session", default=None)


def bind_request_session(owner: object, session: AsyncSession) -> None:
    """The running request's session is ``session``, given by ``owner`` (a Rocketbox)."""
    _request_session.set((owner, session))  # the request's task ends with it


def request_session(owner: object) -> AsyncSession | None:
    """The session ``owner.session`` gave the running request, if it did."""
    bound = _request_session.get()
    return bound[1] if bound is not None and bound[0] is owner else None
