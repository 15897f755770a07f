"""The Flask extension: :class:`Rocketbox` and the per-app state it keeps.

``Rocketbox(app)`` or ``rocketbox.init_app(app)`` sets the ``ROCKETBOX_*``
defaults with ``app.config.setdefault`` and stores a :class:`FlaskState` in
``app.extensions["rocketbox"]``; the extension object itself holds nothing,
so one object serves many apps. A second ``init_app`` on the same app raises.

Configuration (docs/integrations.md has the full table):

``ROCKETBOX_DATABASE``
    a SQLAlchemy :class:`~sqlalchemy.Engine`, a database URL, or a
    Flask-SQLAlchemy ``db``; ``None`` uses the app's Flask-SQLAlchemy
    extension when there is one.
``ROCKETBOX_BROKER``, ``ROCKETBOX_PRODUCER_GROUP``, ``ROCKETBOX_MODE``
    what :class:`~outbox.config.Outbox` says.
``ROCKETBOX_ROLLBACK_ON_ERROR_STATUS``
    a 4xx/5xx response rolls the view's transaction back (default ``True``).
``ROCKETBOX_CELERY_BROKER``, ``ROCKETBOX_CELERY_BACKEND``
    where the relay tasks go; ``None`` means kombu's SQLAlchemy transport on
    the database (``sqla+`` + its URL), ``""`` means no Celery at all (run
    the sweeper yourself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flask import Flask
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from integrations._unit import current_unit
from integrations.errors import AlreadyInitialisedError
from integrations.flask._cli import rocketbox_cli
from integrations.flask._state import DEFAULTS, EXTENSION_KEY, FlaskState, state_for
from outbox.errors import ConfigurationError, NoTransactionError
from outbox.targets.address import parse_broker_address

__all__ = ["EXTENSION_KEY", "FlaskState", "Rocketbox", "publish", "state_for"]


class Rocketbox:
    """The Flask extension (``Rocketbox(app)``, or ``Rocketbox()`` then ``init_app``)."""

    def __init__(self, app: Flask | None = None) -> None:
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        if EXTENSION_KEY in app.extensions:
            raise AlreadyInitialisedError(app=app.name)
        for key, value in DEFAULTS.items():
            app.config.setdefault(key, value)
        _check_settings(app)
        app.extensions[EXTENSION_KEY] = FlaskState(app)
        app.cli.add_command(rocketbox_cli)

    # -- in views --------------------------------------------------------------------

    @staticmethod
    def publish(topic: str | None, body: Any, *, tag: str | None = None,
                keys: str | Sequence[str] | None = None, message_group: str | None = None,
                headers: Mapping[str, Any] | None = None) -> str:
        """:func:`publish`."""
        return publish(topic, body, tag=tag, keys=keys, message_group=message_group,
                       headers=headers)

    @property
    def session(self) -> Session:
        """The running decorated view's session (a plain one when no Flask-SQLAlchemy)."""
        session = current_unit().session
        if session is None:
            raise NoTransactionError("the running view has no SQLAlchemy session")
        return session

    @staticmethod
    def connection() -> Connection:
        """The running decorated view's connection, inside its transaction."""
        return current_unit().connection()

    def state(self, app: Flask | None = None) -> FlaskState:
        return state_for(app)


def publish(topic: str | None, body: Any, *, tag: str | None = None,
            keys: str | Sequence[str] | None = None, message_group: str | None = None,
            headers: Mapping[str, Any] | None = None) -> str:
    """Add a message to the running ``@transactional_message`` view's transaction.

    ``topic`` ``None`` takes the decorator's topic; so do ``tag``, ``keys``,
    ``message_group`` and ``headers`` when not given. Returns the ``tx_id``.
    Raises :class:`~outbox.errors.NoTransactionError` outside such a view.
    """
    return current_unit().publish(topic, body, tag=tag, keys=keys,
                                  message_group=message_group, headers=headers)


def _check_settings(app: Flask) -> None:
    """Refuse at ``init_app`` what would make every request fail (Django's rocketbox.E001):
    a malformed ``ROCKETBOX_BROKER``, an unknown ``ROCKETBOX_MODE``. The database is only
    reached on first use (the app may be configured before it exists)."""
    parse_broker_address(app.config["ROCKETBOX_BROKER"], setting="ROCKETBOX_BROKER")
    mode = app.config["ROCKETBOX_MODE"]
    if mode not in ("outbox", "half_first"):
        raise ConfigurationError(f"ROCKETBOX_MODE = {mode!r}: expected 'outbox' or "
                                 "'half_first'", setting="ROCKETBOX_MODE")
