"""Migration test fixtures: an empty database per test, SQLite file or private PostgreSQL DB."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support import PostgresServer


def _private_pg_url(server: PostgresServer) -> str:
    return server.create_database(f"mig_{uuid.uuid4().hex[:12]}").url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a SQLite file, or a fresh database on the session's PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / f'app-{uuid.uuid4().hex[:6]}.sqlite'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return _private_pg_url(server)


@pytest.fixture
def other_db_url(request: pytest.FixtureRequest, db_url: str, tmp_path: Path) -> str:
    """A second empty database of the same kind as ``db_url``."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'other.sqlite'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return _private_pg_url(server)
