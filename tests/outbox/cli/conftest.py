"""CLI test fixtures: an empty database per test (SQLite file or private PostgreSQL DB)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.support import PostgresServer


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def cli_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database nobody has migrated yet."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cli.sqlite'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database(f"cli_{uuid.uuid4().hex[:12]}").url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli-only.sqlite'}"
