"""Fixtures for the operations tests: a migrated database per test, SQLite or PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.outbox.status.outbox_ops_support import OpsDb, open_ops_db, private_pg_url
from tests.support import PostgresServer


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ops_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpsDb]:
    """A database migrated to head (a SQLite file, or a private PostgreSQL database)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ops.sqlite'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        url = private_pg_url(server)
    db = open_ops_db(url)
    yield db
    db.engine.dispose()
