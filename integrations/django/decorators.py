"""``@transactional_message`` for Django function views, and a mixin for class-based views.

::

    @require_POST
    @transactional_message(topic="Orders", tag="OrderCreated",
                           body=lambda response: json.loads(response.content))
    def create_order(request):
        order = Order.objects.create(...)
        return JsonResponse({"id": order.id}, status=201)

The view runs in ``transaction.atomic(using=alias)`` (a savepoint when
``ATOMIC_REQUESTS`` already opened one); the status rows are written through
that same connection and transaction. An exception rolls back and re-raises;
a 4xx/5xx response rolls back (``ROLLBACK_ON_ERROR_STATUS``).
``transaction.on_commit`` then enqueues the relay task (``outbox`` mode) or
ends the halves (``half_first`` mode). The semantics are the Flask
integration's, see docs/integrations.md.

An ``async def`` view works too. Django's transactions are sync, so the
whole atomic block runs in a thread (``sync_to_async``, thread-sensitive:
the request's one sync thread), and the view's coroutine runs back on the
event loop from inside it (``async_to_sync``); the async ORM calls it makes
(``acreate``, ``aget`` ...) land in that same thread, so on the same
connection, inside the transaction. ``await apublish(...)`` adds a message
from such a view. docs/async.md says what this costs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeVar, cast

from asgiref.sync import async_to_sync, sync_to_async
from django.db import connections, transaction
from django.http import HttpResponseBase
from sqlalchemy import Connection

from integrations._unit import (
    MessageSpec,
    UnitOfWork,
    current_unit,
    error_status_rolls_back,
    running,
)
from integrations.django.conf import state
from integrations.django.db import sqlalchemy_connection
from outbox.config import Mode
from outbox.errors import ConfigurationError, NoTransactionError

__all__ = ["TransactionalMessageMixin", "apublish", "publish", "transactional_message"]

F = TypeVar("F", bound=Callable[..., Any])


def transactional_message(
    topic: str | None = None, *, tag: str | None = None, keys: Any = None,
    message_group: Any = None, headers: Mapping[str, Any] | None = None,
    mode: Mode | None = None, body: Callable[[Any], Any] | None = None,
    using: str | None = None,
) -> Callable[[F], F]:
    """Run the decorated view in one DB transaction with the messages it publishes.

    ``using`` names the database alias (default ``ROCKETBOX["DATABASE"]``).
    """
    spec = MessageSpec(topic=topic, tag=tag, keys=keys, message_group=message_group,
                       headers=headers, mode=mode, body=body)

    def decorate(view: F) -> F:
        if inspect.iscoroutinefunction(view):
            @functools.wraps(view)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                # the atomic block in the request's sync thread; the view back on the loop
                return await sync_to_async(run_view, thread_sensitive=True)(
                    spec, using, async_to_sync(view), args, kwargs)

            return cast(F, async_wrapper)

        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return run_view(spec, using, view, args, kwargs)

        return cast(F, wrapper)

    return decorate


class TransactionalMessageMixin:
    """``dispatch`` runs in one transaction with its messages (class-based views).

    Set ``rocketbox_topic``, ``rocketbox_tag``, ``rocketbox_keys``,
    ``rocketbox_message_group``, ``rocketbox_mode``, ``rocketbox_using`` and
    ``rocketbox_body`` (a function of the response) as class attributes.
    """

    rocketbox_topic: ClassVar[str | None] = None
    rocketbox_tag: ClassVar[str | None] = None
    rocketbox_keys: ClassVar[Any] = None
    rocketbox_message_group: ClassVar[Any] = None
    rocketbox_headers: ClassVar[Mapping[str, Any] | None] = None
    rocketbox_mode: ClassVar[Mode | None] = None
    rocketbox_using: ClassVar[str | None] = None
    rocketbox_body: ClassVar[Callable[[Any], Any] | None] = None

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        body = cls.__dict__.get("rocketbox_body", None)
        for klass in cls.__mro__:  # a plain function attribute, not a bound method
            if "rocketbox_body" in klass.__dict__:
                body = klass.__dict__["rocketbox_body"]
                break
        if isinstance(body, staticmethod):
            body = body.__func__
        spec = MessageSpec(topic=self.rocketbox_topic, tag=self.rocketbox_tag,
                           keys=self.rocketbox_keys, message_group=self.rocketbox_message_group,
                           headers=self.rocketbox_headers, mode=self.rocketbox_mode, body=body)
        parent = super().dispatch  # type: ignore[misc]
        return run_view(spec, self.rocketbox_using, parent, (request, *args), kwargs)


def _status(response: Any) -> int:
    if isinstance(response, HttpResponseBase):
        return int(response.status_code)
    code = getattr(response, "status_code", 200)
    return int(code)


def run_view(spec: MessageSpec, using: str | None, view: Callable[..., Any],
             args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    current = state()
    alias = using or str(current.options["DATABASE"])
    if alias not in connections:
        raise ConfigurationError(f"no database {alias!r} in settings.DATABASES")
    django_connection = connections[alias]
    if not django_connection.features.supports_transactions:
        raise ConfigurationError(f"database {alias!r} does not support transactions: "
                                 "rocketbox needs them, so messages commit with the rows")
    mode: Mode = spec.mode or cast(Mode, current.options["MODE"])
    with contextlib.ExitStack() as stack:
        sa_connections: list[Connection] = []

        def connection() -> Connection:
            if not django_connection.in_atomic_block:
                raise NoTransactionError(f"database {alias!r} has no open transaction")
            if not sa_connections:
                sa_connections.append(stack.enter_context(sqlalchemy_connection(alias)))
            return sa_connections[0]

        unit = UnitOfWork(outbox=current.outbox, spec=spec, connection=connection, mode=mode,
                          publisher=current.publisher if mode == "half_first" else None,
                          celery_app=current.celery)
        with transaction.atomic(using=alias), running(unit):
            response = view(*args, **kwargs)
            if error_status_rolls_back(_status(response),
                                       bool(current.options["ROLLBACK_ON_ERROR_STATUS"])):
                transaction.set_rollback(True, using=alias)
                return response
            unit.publish_result(response)
            unit.before_commit()
            if unit.tx_ids:
                transaction.on_commit(unit.after_commit, using=alias)
    return response


def publish(topic: str | None, body: Any, *, tag: str | None = None,
            keys: str | Sequence[str] | None = None, message_group: str | None = None,
            headers: Mapping[str, Any] | None = None) -> str:
    """Add a message to the running ``@transactional_message`` view's transaction."""
    return current_unit().publish(topic, body, tag=tag, keys=keys,
                                  message_group=message_group, headers=headers)


async def apublish(topic: str | None, body: Any, *, tag: str | None = None,
                   keys: str | Sequence[str] | None = None, message_group: str | None = None,
                   headers: Mapping[str, Any] | None = None) -> str:
    """:func:`publish` for an ``async def`` view: runs in the view's transaction's thread."""
    return await sync_to_async(publish, thread_sensitive=True)(
        topic, body, tag=tag, keys=keys, message_group=message_group, headers=headers)
