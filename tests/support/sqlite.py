"""SQLite as the outbox's embedded backend, with real transactions for the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.pool import ConnectionPoolEntry

from outbox.models import metadata


def sqlite_outbox_engine(path: Path) -> Engine:
    """A SQLite file with the outbox tables, and real BEGIN/SAVEPOINT (SQLAlchemy's recipe).

    pysqlite's own transaction handling would otherwise delay BEGIN and make
    savepoints unreliable; the recipe hands both to SQLAlchemy.
    """
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _no_driver_transactions(dbapi_conn: DBAPIConnection, _entry: ConnectionPoolEntry
                                ) -> None:
        dbapi_conn.isolation_level = None  # type: ignore[attr-defined]

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    metadata.create_all(engine)
    return engine
