"""``@transactional_message``: a Flask view and its messages in one DB transaction.

::

    @app.post("/orders")
    @transactional_message(topic="Orders", tag="OrderCreated",
                           body=lambda rv: rv[0], keys=lambda rv: str(rv[0]["id"]))
    def create_order():
        order = Order(...)
        db.session.add(order)
        db.session.flush()
        return {"id": order.id}, 201

The decorator opens one transaction on Flask-SQLAlchemy's ``db.session``
(joining the one it already has, if any) or on a plain session the extension
makes; the view's writes and every message (``publish()`` calls, and the
``body=`` message made from the return value) commit together. An exception
rolls everything back and re-raises; a 4xx/5xx response rolls back too,
unless ``ROCKETBOX_ROLLBACK_ON_ERROR_STATUS`` is false. After the commit the
relay task is enqueued (``outbox`` mode) or the halves are ended
(``half_first`` mode). docs/integrations.md has the whole contract.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from flask import Response, current_app

from integrations._unit import (
    MessageSpec,
    UnitOfWork,
    error_status_rolls_back,
    running,
    session_connection,
)
from integrations.flask._state import FlaskState, state_for
from outbox.config import Mode

__all__ = ["transactional_message"]

F = TypeVar("F", bound=Callable[..., Any])


def transactional_message(
    topic: str | None = None, *, tag: str | None = None, keys: Any = None,
    message_group: Any = None, headers: Mapping[str, Any] | None = None,
    mode: Mode | None = None, body: Callable[[Any], Any] | None = None,
) -> Callable[[F], F]:
    """Run the decorated view in one DB transaction with the messages it publishes.

    ``topic``, ``tag``, ``keys``, ``message_group`` and ``headers`` are the
    defaults for ``publish()`` calls in the view; with ``body=`` the view's
    return value also becomes a message (``keys`` and ``message_group`` may
    then be functions of the return value too). ``mode`` overrides
    ``ROCKETBOX_MODE``.
    """
    spec = MessageSpec(topic=topic, tag=tag, keys=keys, message_group=message_group,
                       headers=headers, mode=mode, body=body)

    def decorate(view: F) -> F:
        @functools.wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return _run(state_for(), spec, view, args, kwargs)

        return cast(F, wrapper)

    return decorate


def _run(state: FlaskState, spec: MessageSpec, view: Callable[..., Any],
         args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    session = state.session()
    owns = state.owns_sessions
    if not session.in_transaction():
        session.begin()
    unit_mode: Mode = spec.mode or cast(Mode, state.mode)
    unit = UnitOfWork(outbox=state.outbox, spec=spec, connection=session_connection(session),
                      mode=unit_mode,
                      publisher=state.publisher if unit_mode == "half_first" else None,
                      celery_app=state.celery, session=session)
    committing = False
    try:
        try:
            with running(unit):
                unit.connection()  # refuses an autocommit database before the view writes
                value = view(*args, **kwargs)
                response: Response = current_app.make_response(value)
                if error_status_rolls_back(response.status_code,
                                           state.rollback_on_error_status):
                    session.rollback()
                    unit.after_rollback()
                    return response
                unit.publish_result(value)
                unit.before_commit()
            committing = True
            session.commit()
        except BaseException:
            session.rollback()
            if not committing:
                # A failed commit may still have committed: leave any halves to the
                # broker's check-back, which asks the database.
                unit.after_rollback()
            raise
    finally:
        if owns:
            session.close()
    unit.after_commit()
    return response
