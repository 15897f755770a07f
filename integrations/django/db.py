"""Django's database, seen by SQLAlchemy: URLs for the relay, connections for the view.

:func:`sqlalchemy_url` turns an alias's ``DATABASES`` entry into a SQLAlchemy
URL (PostgreSQL through psycopg 3, SQLite); the relay, the check-back
responder and the status command connect with it.

:func:`sqlalchemy_connection` wraps the alias's *current* DB-API connection,
the one Django's ``transaction.atomic`` is running on, in a SQLAlchemy
:class:`~sqlalchemy.Connection`, so ``outbox.publish`` writes the status row
with the one schema (:mod:`outbox.models`) inside Django's transaction. That
engine never commits, rolls back or closes anything: Django owns the
connection and its transaction.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from django.db import connections
from sqlalchemy import URL, Connection, Engine, create_engine, pool

from outbox import at_commit, migrate
from outbox.errors import ConfigurationError
from outbox.sqlite import apply_pragmas

__all__ = ["alembic_downgrade", "borrowed_engine", "sqlalchemy_connection", "sqlalchemy_url",
           "tune_sqlite_connection"]

_engines: dict[str, Engine] = {}
_lock = threading.Lock()


def sqlalchemy_url(alias: str = "default") -> URL:
    """The SQLAlchemy URL of Django's database ``alias``."""
    if alias not in connections:
        raise ConfigurationError(f"no database {alias!r} in settings.DATABASES")
    settings: dict[str, Any] = connections[alias].settings_dict
    engine = str(settings.get("ENGINE", ""))
    name = settings.get("NAME")
    if engine.endswith("sqlite3"):
        return URL.create("sqlite", database=str(name) if name else None)
    if engine.endswith(("postgresql", "postgis")):
        port = settings.get("PORT")
        return URL.create("postgresql+psycopg", username=settings.get("USER") or None,
                          password=settings.get("PASSWORD") or None,
                          host=settings.get("HOST") or None,
                          port=int(port) if port else None, database=name or None)
    raise ConfigurationError(f"database {alias!r}: rocketbox supports PostgreSQL and SQLite, "
                             f"not {engine!r}")


def tune_sqlite_connection(*, connection: Any, **_kwargs: Any) -> None:
    """``connection_created``: WAL and a busy timeout on Django's SQLite connections.

    Django's own ``timeout`` option (5 s by default) is replaced by
    :data:`outbox.sqlite.BUSY_TIMEOUT` only when it is not set; the relay
    writes the same file, so a request's write may have to wait for a sweep.
    """
    if connection.vendor != "sqlite":
        return
    timeout = connection.settings_dict.get("OPTIONS", {}).get("timeout")
    apply_pragmas(connection.connection,
                  **({} if timeout is None else {"busy_timeout": float(timeout)}))


def _never(*_args: Any) -> None:
    """Django commits, rolls back and closes its own connection."""


def borrowed_engine(alias: str = "default") -> Engine:
    """An engine whose connections are Django's current connection for ``alias``."""
    with _lock:
        engine = _engines.get(alias)
        if engine is not None:
            return engine

        def creator() -> Any:
            django_connection = connections[alias]
            django_connection.ensure_connection()
            return django_connection.connection

        # Django commits this connection, so SQLAlchemy's commit event never sees
        # the real COMMIT: outbox rows must be written at once, never held for it
        engine = create_engine(sqlalchemy_url(alias), creator=creator, poolclass=pool.NullPool,
                               pool_reset_on_return=None,
                               execution_options={at_commit.OPTION: False})
        dialect: Any = engine.dialect
        for name in ("do_commit", "do_rollback", "do_close", "do_terminate"):
            setattr(dialect, name, _never)
        _engines[alias] = engine
        return engine


@contextlib.contextmanager
def sqlalchemy_connection(alias: str = "default") -> Iterator[Connection]:
    """A SQLAlchemy connection inside the transaction Django has open on ``alias``."""
    with borrowed_engine(alias).connect() as conn:
        conn.begin()
        yield conn


def alembic_downgrade(schema_editor: Any, revision: str) -> None:
    """Unapply a Django migration: rocketbox's Alembic migrations back to ``revision``, on
    the migration's own connection."""
    with sqlalchemy_connection(schema_editor.connection.alias) as conn:
        migrate.downgrade(conn, revision)


def forget_engines() -> None:
    """Drop the cached engines (settings changed, e.g. in tests)."""
    with _lock:
        _engines.clear()
