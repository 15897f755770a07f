"""FastAPI's ``Rocketbox`` refuses, when it is made (app start-up), a broker address or a
database it cannot work with: one ``ConfigurationError`` naming the keyword."""

from __future__ import annotations

from pathlib import Path

import pytest

from integrations.fastapi import Rocketbox, sync_url
from outbox import ConfigurationError


@pytest.mark.parametrize("broker", ["nohost", "127.0.0.1:99999", "http://x:1", ""])
@pytest.mark.timeout(30)
def test_a_malformed_broker_fails_when_the_app_is_made(broker: str, tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'app.sqlite'}"
    with pytest.raises(ConfigurationError, match=r"^broker = ") as caught:
        Rocketbox(url, broker=broker, celery_broker="")
    assert caught.value.setting == "broker"
    Rocketbox(url, broker="127.0.0.1:10911", celery_broker="")  # the right one is taken


@pytest.mark.timeout(30)
def test_another_database_is_refused_and_async_urls_get_their_sync_twin() -> None:
    with pytest.raises(ConfigurationError, match="rocketbox supports PostgreSQL and SQLite, "
                                                 "not 'mysql'"):
        Rocketbox("mysql+aiomysql://app:pw@127.0.0.1/shop", celery_broker="")
    assert str(sync_url("postgresql+asyncpg://a@h/d")) == "postgresql+psycopg://a@h/d"
    assert str(sync_url("postgresql+psycopg_async://a@h/d")) == "postgresql+psycopg://a@h/d"
    assert str(sync_url("sqlite+aiosqlite:////x.db")) == "sqlite:////x.db"
