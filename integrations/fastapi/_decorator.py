"""``@rocketbox.transactional_message``: an ``async def`` FastAPI view and its messages in
one DB transaction.

The contract is the Flask and Django decorators' (docs/integrations.md,
:mod:`integrations._unit`): the view runs in the transaction of the
request's ``AsyncSession`` (the one :meth:`Rocketbox.session` gave it, else
a new one); an exception rolls back and goes on (``HTTPException`` too); a
4xx/5xx rolls back (``rollback_on_error_status``); otherwise the ``body=``
message is added and everything commits. The status is the returned
``Response``'s, else the one set on an injected ``response: Response``,
else a success: the route's own ``status_code=`` is not visible here.

The unit of work is the sync one of the other integrations, run on the sync
session under the ``AsyncSession`` with ``run_sync`` (SQLAlchemy's greenlet
bridge): every database call is awaited on the event loop, and the last
message rides on the ``COMMIT`` where :mod:`outbox.at_commit` allows
(psycopg's async driver). After the commit, ``Outbox.on_commit`` (the
Celery enqueue) runs in the loop's default executor, so the loop never
waits on the Celery broker.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from sqlalchemy.ext.asyncio import async_session
from sqlalchemy.orm import Session
from starlette.responses import Response

from integrations._unit import (
    MessageSpec,
    UnitOfWork,
    current_unit,
    error_status_rolls_back,
    running,
    session_connection,
)
from integrations.fastapi._request import Host, request_session
from outbox.config import Mode
from outbox.errors import ConfigurationError, NoTransactionError
from outbox.targets import HalfOutcome, OutgoingMessage

__all__ = ["publish", "transactional_message"]

F = TypeVar("F", bound=Callable[..., Any])


def transactional_message(
    rocketbox: Host, topic: str | None = None, *, tag: str | None = None,
    keys: Any = None, message_group: Any = None, headers: Mapping[str, Any] | None = None,
    mode: Mode | None = None, body: Callable[[Any], Any] | None = None,
) -> Callable[[F], F]:
    """Run the decorated ``async def`` view in one DB transaction with its messages."""
    spec = MessageSpec(topic=topic, tag=tag, keys=keys, message_group=message_group,
                       headers=headers, mode=mode, body=body)

    def decorate(view: F) -> F:
        if not inspect.iscoroutinefunction(view):
            raise ConfigurationError(
                f"@transactional_message for FastAPI decorates an async def view; "
                f"{getattr(view, '__name__', view)!r} is not one")

        @functools.wraps(view)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return await _run(rocketbox, spec, view, args, kwargs)

        return cast(F, wrapper)

    return decorate


def _status(value: Any, kwargs: Mapping[str, Any]) -> int:
    if isinstance(value, Response):
        return value.status_code
    for argument in kwargs.values():  # an injected ``response: Response``
        if isinstance(argument, Response) and argument.status_code is not None:
            return int(argument.status_code)
    return 200


def _open(_session: Session, unit: UnitOfWork) -> None:
    unit.connection()  # refuses an autocommit database before the view writes


def _close(_session: Session, unit: UnitOfWork, value: Any) -> list[OutgoingMessage]:
    """The ``body=`` message, then (``half_first``) the halves to send."""
    unit.publish_result(value)
    return unit.halves_to_send()


def _record(_session: Session, unit: UnitOfWork, results: list[HalfOutcome]) -> None:
    unit.record_halves(results)


async def _run(rocketbox: Host, spec: MessageSpec, view: Callable[..., Any],
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    given = request_session(rocketbox)
    mode: Mode = spec.mode or rocketbox.mode
    session = given if given is not None else rocketbox.sessions()
    unit = UnitOfWork(outbox=rocketbox.outbox, spec=spec,
                      connection=session_connection(session.sync_session), mode=mode,
                      publisher=rocketbox.publisher if mode == "half_first" else None,
                      celery_app=rocketbox.celery, session=session.sync_session)
    loop = asyncio.get_running_loop()
    committing = False
    try:
        if not session.in_transaction():
            await session.begin()
        try:
            with running(unit):
                await session.run_sync(_open, unit)
                value = await view(*args, **kwargs)
                if error_status_rolls_back(_status(value, kwargs),
                                           rocketbox.rollback_on_error_status):
                    await session.rollback()
                    return value
                outgoing = await session.run_sync(_close, unit, value)
                if outgoing:  # half_first: the broker round trip off the loop
                    results = await loop.run_in_executor(None, unit.send_halves, outgoing)
                    await session.run_sync(_record, unit, results)
            committing = True
            await session.commit()
        except BaseException:
            await session.rollback()
            if not committing and unit.tx_ids and mode == "half_first":
                # halves sent before the commit was reached: end them ROLLBACK (a failed
                # commit may still have committed: its halves are left to the check-back)
                await loop.run_in_executor(None, unit.after_rollback)
            raise
    finally:
        if given is None:
            await session.close()
    if unit.tx_ids and (mode == "half_first" or rocketbox.outbox.on_commit is not None):
        # the Celery enqueue (or the halves' ends) may block on a broker: off the loop
        await loop.run_in_executor(None, unit.after_commit)
    return value


async def publish(topic: str | None, body: Any, *, tag: str | None = None,
                  keys: str | Sequence[str] | None = None, message_group: str | None = None,
                  headers: Mapping[str, Any] | None = None) -> str:
    """Add a message to the running decorated view's transaction: ``await publish(...)``.

    ``topic`` ``None`` takes the decorator's topic; so do the options not
    given. Returns the ``tx_id``; raises :class:`NoTransactionError` outside
    such a view.
    """
    unit = current_unit()
    owner = async_session(unit.session) if unit.session is not None else None
    if owner is None:
        raise NoTransactionError("this publish() is for async views decorated by "
                                 "integrations.fastapi's transactional_message")
    tx_id: str = await owner.run_sync(
        lambda _s: unit.publish(topic, body, tag=tag, keys=keys,
                                message_group=message_group, headers=headers))
    return tx_id
