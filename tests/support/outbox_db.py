"""A fresh PostgreSQL database with the outbox tables, as the tests' fixtures make them.

:func:`pg_outbox_database` creates the tables from ``outbox.models.metadata``
plus the sequence the migrations add beside them, runs the test's own extra
DDL (a business table, say), yields the engine and its URL and disposes of
the engine on exit. Tests that need the migrations themselves call
``outbox.migrate`` instead.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Engine, create_engine, text

from outbox.models import metadata

from .servers import PostgresServer

__all__ = ["pg_outbox_database"]


@contextlib.contextmanager
def pg_outbox_database(server: PostgresServer, prefix: str, *, extra_sql: tuple[str, ...] = (),
                       **engine_options: Any) -> Iterator[tuple[Engine, str]]:
    """``(engine, url)`` of a new database ``<prefix>_<random>`` with the outbox tables."""
    db = server.create_database(f"{prefix}_{uuid.uuid4().hex[:12]}")
    engine = create_engine(db.url, **engine_options)
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:  # what the migration adds beside the tables
            conn.execute(text("CREATE SEQUENCE IF NOT EXISTS rocketbox_transaction_seq"))
            for statement in extra_sql:
                conn.execute(text(statement))
        yield engine, db.url
    finally:
        engine.dispose()
