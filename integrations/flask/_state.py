"""The per-app state of the Flask extension: :class:`FlaskState`, found with :func:`state_for`.

``Rocketbox.init_app`` (:mod:`integrations.flask._extension`) stores one in
``app.extensions["rocketbox"]``; the decorator and the ``flask rocketbox``
commands (:mod:`integrations.flask._cli`) read it from there. The outbox and
its Celery app are assembled from the ``ROCKETBOX_*`` settings by
:mod:`integrations._assembly`, as in the other integrations.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from integrations._assembly import OutboxOptions, assemble
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.migrate import engine_for
from outbox.sqlite import tune_sqlite_engine
from outbox.targets import ProcessPublishers, Publisher
from outbox.targets.choose import publisher_for

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["DEFAULTS", "EXTENSION_KEY", "FlaskState", "state_for"]

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

    def options(self) -> OutboxOptions:
        """The app's ``ROCKETBOX_*`` settings the outbox and Celery are assembled from."""
        return OutboxOptions(**{f.name: self.config(f.name.upper())
                                for f in dataclasses.fields(OutboxOptions)})

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
            built = assemble(engine, self.options(), setting=lambda name: f"ROCKETBOX_{name}")
            self._base_outbox, self._outbox, self._db = built.base_outbox, built.outbox, db
            self._celery, self._celery_broker = built.celery, built.celery_broker
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
