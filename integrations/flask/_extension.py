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

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app
from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from integrations._unit import current_unit
from integrations.errors import AlreadyInitialisedError
from outbox.config import Outbox, RelaySettings
from outbox.errors import ConfigurationError, NoTransactionError
from outbox.migrate import engine_for
from outbox.serializers import JsonSerializer, Serializer
from outbox.sqlite import tune_sqlite_engine
from outbox.targets import ProcessPublishers, Publisher
from outbox.targets.address import parse_broker_address
from outbox.targets.choose import publisher_for

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["EXTENSION_KEY", "FlaskState", "Rocketbox", "publish", "state_for"]

EXTENSION_KEY = "rocketbox"

DEFAULTS: Mapping[str, Any] = {
    "ROCKETBOX_DATABASE": None,
    "ROCKETBOX_BROKER": "127.0.0.1:10911",
    "ROCKETBOX_PRODUCER_GROUP": "rocketbox",
    "ROCKETBOX_MODE": "outbox",
    "ROCKETBOX_ROLLBACK_ON_ERROR_STATUS": True,
    "ROCKETBOX_SERIALIZER": None,
    "ROCKETBOX_RELAY": None,
    "ROCKETBOX_LOCAL_TX_TIMEOUT": 60.0,
    "ROCKETBOX_CELERY_BROKER": None,
    "ROCKETBOX_CELERY_BACKEND": None,
    "ROCKETBOX_CELERY_SETTINGS": None,
    "ROCKETBOX_ACCESS_KEY": None,
    "ROCKETBOX_SECRET_KEY": None,
    "ROCKETBOX_MAX_BODY_SIZE": None,
}


@dataclass
class FlaskState:
    """What one app's rocketbox needs; built lazily from ``app.config`` on first use.

    ``outbox`` has ``on_commit`` wired to the Celery relay task (when there is
    a Celery broker); ``base_outbox`` is the same without it (what the relay
    worker runs with).
    """

    app: Flask
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _built: bool = False
    _outbox: Outbox | None = None
    _base_outbox: Outbox | None = None
    _celery: Celery | None = None
    _celery_broker: str | None = None
    _sessions: sessionmaker[Session] | None = None
    _db: Any = None
    _publishers: ProcessPublishers = field(init=False)

    def __post_init__(self) -> None:
        self._publishers = ProcessPublishers(lambda: publisher_for(self.outbox))

    # -- configuration ---------------------------------------------------------------

    def config(self, name: str) -> Any:
        return self.app.config[f"ROCKETBOX_{name}"]

    @property
    def rollback_on_error_status(self) -> bool:
        return bool(self.config("ROLLBACK_ON_ERROR_STATUS"))

    @property
    def mode(self) -> str:
        return str(self.config("MODE"))

    def _build(self) -> None:
        if self._built:  # set last, under the lock: once True, every field is in place
            return
        with self._lock:
            if self._built:  # another thread built it while this one waited
                return  # type: ignore[unreachable]  # mypy cannot see the other thread
            engine, db = self._database()
            tune_sqlite_engine(engine)  # WAL and a busy timeout: the relay writes too
            serializer: Serializer = self.config("SERIALIZER") or JsonSerializer()
            relay: RelaySettings = self.config("RELAY") or RelaySettings()
            broker = str(parse_broker_address(self.config("BROKER"), setting="ROCKETBOX_BROKER"))
            base = Outbox(engine=engine, broker=broker,
                          producer_group=self.config("PRODUCER_GROUP"), serializer=serializer,
                          relay=relay, mode=self.config("MODE"),
                          local_tx_timeout=float(self.config("LOCAL_TX_TIMEOUT")),
                          access_key=self.config("ACCESS_KEY"),
                          secret_key=self.config("SECRET_KEY"),
                          max_body_size=_max_body_size(self.config("MAX_BODY_SIZE")))
            outbox = base
            celery_broker = self.config("CELERY_BROKER")
            if celery_broker is None:
                celery_broker = "sqla+" + engine.url.render_as_string(hide_password=False)
            if celery_broker:
                from outbox.celery import celery_on_commit, make_celery

                self._celery = make_celery(base, broker_url=celery_broker,
                                           backend_url=self.config("CELERY_BACKEND"),
                                           settings=self.config("CELERY_SETTINGS"))
                outbox = dataclasses.replace(base, on_commit=celery_on_commit(self._celery))
            self._celery_broker = celery_broker or None
            self._base_outbox, self._outbox, self._db = base, outbox, db
            self._sessions = sessionmaker(engine) if db is None else None
            self._built = True

    def _database(self) -> tuple[Engine, Any]:
        """The engine, and the Flask-SQLAlchemy ``db`` when that is what was configured."""
        setting = self.config("DATABASE")
        if setting is None:
            setting = self.app.extensions.get("sqlalchemy")
            if setting is None:
                raise ConfigurationError(
                    "ROCKETBOX_DATABASE is not set and the app has no Flask-SQLAlchemy "
                    "extension: set it to an Engine, a database URL or the `db` object")
        if isinstance(setting, Engine):
            return setting, None
        if isinstance(setting, str):
            return engine_for(setting), None
        if hasattr(type(setting), "engines") and hasattr(setting, "session"):
            with self.app.app_context():
                engine = setting.engine
            if not isinstance(engine, Engine):
                raise ConfigurationError("ROCKETBOX_DATABASE's Flask-SQLAlchemy engine is "
                                         "not a SQLAlchemy Engine")
            return engine, setting
        raise ConfigurationError(
            f"ROCKETBOX_DATABASE must be an Engine, a database URL or a Flask-SQLAlchemy "
            f"db, not {type(setting).__name__}")

    # -- what the decorator and the CLI use ------------------------------------------

    @property
    def outbox(self) -> Outbox:
        self._build()
        assert self._outbox is not None
        return self._outbox

    @property
    def base_outbox(self) -> Outbox:
        self._build()
        assert self._base_outbox is not None
        return self._base_outbox

    @property
    def celery(self) -> Celery | None:
        self._build()
        return self._celery

    @property
    def celery_broker(self) -> str | None:
        self._build()
        return self._celery_broker

    def session(self) -> Session:
        """The session a decorated view runs in: Flask-SQLAlchemy's, or a new plain one."""
        self._build()
        if self._db is not None:
            session: Session = self._db.session()  # this app context's session
            return session
        assert self._sessions is not None
        return self._sessions()

    @property
    def owns_sessions(self) -> bool:
        """True when the extension makes (and closes) the sessions itself."""
        self._build()
        return self._db is None

    def publisher(self) -> Publisher:
        """The broker seam for ``half_first`` mode, one per process (made on first use)."""
        return self._publishers.get()

    def close(self) -> None:
        """Close this process's half-first publisher (for tests and shutdown)."""
        self._publishers.close()


def state_for(app: Flask | None = None) -> FlaskState:
    """The app's :class:`FlaskState` (the current app by default)."""
    target = app if app is not None else current_app._get_current_object()  # type: ignore[attr-defined]
    state = target.extensions.get(EXTENSION_KEY)
    if not isinstance(state, FlaskState):
        raise ConfigurationError("rocketbox is not initialised on this app: "
                                 "call Rocketbox(app) or rocketbox.init_app(app)")
    return state


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
        from integrations.flask._cli import rocketbox_cli

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


def _max_body_size(value: int | None) -> int:
    """``max_body_size`` for the Outbox: the setting, else the default (broker_lite's)."""
    from outbox.validation import DEFAULT_MAX_BODY_SIZE

    return DEFAULT_MAX_BODY_SIZE if value is None else int(value)
