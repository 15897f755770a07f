"""``await publish(async_session, ...)``: the sync path's row, through asyncpg, psycopg async
and aiosqlite, on real PostgreSQL and SQLite.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from outbox import NoTransactionError, Outbox, publish
from outbox.at_commit import queued
from outbox.models import transaction_table as t
from tests.support import wait_until
from tests.support.asgi import async_database

DRIVERS = ["aiosqlite", pytest.param("asyncpg", marks=pytest.mark.postgres),
           pytest.param("psycopg_async", marks=pytest.mark.postgres)]


@pytest.fixture(params=DRIVERS)
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(sync URL, async URL) of a migrated database with an ``orders`` table."""
    postgres = (request.getfixturevalue("postgres_server")
                if request.param != "aiosqlite" else None)
    return async_database(request.param, tmp_path, postgres)


def _rows(sync_url: str) -> list[Any]:
    engine = create_engine(sync_url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(t).order_by(t.c.seq)))
    finally:
        engine.dispose()


def _run(engine: AsyncEngine, work: Any) -> Any:
    async def main() -> Any:
        try:
            return await work(engine)
        finally:
            await engine.dispose()
    return asyncio.run(main())


@pytest.mark.timeout(60)
def test_commit_writes_the_rows_and_rollback_none(urls: tuple[str, str]) -> None:
    sync_url, async_url = urls
    seen: list[tuple[list[str], int]] = []
    engine = create_async_engine(async_url)
    outbox = Outbox(engine=create_engine(sync_url),
                    on_commit=lambda ids: seen.append((list(ids), threading.get_ident())))

    async def work(engine: AsyncEngine) -> tuple[list[str], int]:
        sessions = async_sessionmaker(engine)
        async with sessions() as session, session.begin():
            await session.execute(text("INSERT INTO orders (id, item) VALUES (1, 'a')"))
            first = await publish(session, "Orders", {"ref": "a"}, outbox=outbox,
                                  tag="OrderCreated", keys=["a", "k"], message_group="g")
            second = await publish(session, "Orders", {"ref": "a", "n": 2}, outbox=outbox)
        with pytest.raises(RuntimeError):
            async with sessions() as session, session.begin():
                await session.execute(text("INSERT INTO orders (id, item) VALUES (2, 'b')"))
                await publish(session, "Orders", {"ref": "b"}, outbox=outbox)
                raise RuntimeError("boom")
        async with engine.connect() as conn:  # an AsyncConnection, committed by hand
            await conn.begin()
            third = await publish(conn, "Audit", b"raw", outbox=outbox)
            await conn.commit()
        return [first, second, third], threading.get_ident()

    ids, loop_thread = _run(engine, work)
    rows = _rows(sync_url)
    assert [r.tx_id for r in rows] == ids
    assert [r.seq for r in rows] == sorted(r.seq for r in rows)
    first = rows[0]
    assert (first.topic, first.tag, first.keys, first.message_group, first.body) == \
        ("Orders", "OrderCreated", "a k", "g", b'{"ref":"a"}')
    assert rows[2].body == b"raw"
    # the hook ran for the committed session and the committed connection (never for the
    # rolled-back one), and not on the event loop's thread
    wait_until(lambda: len(seen) == 2, timeout=10, message=lambda: str(seen))
    assert sorted(ids for ids, _thread in seen) == sorted([ids[:2], ids[2:]])
    assert all(thread != loop_thread for _ids, thread in seen)


@pytest.mark.timeout(30)
def test_publish_without_a_transaction_refuses(urls: tuple[str, str]) -> None:
    sync_url, async_url = urls
    outbox = Outbox(engine=create_engine(sync_url))

    async def work(engine: AsyncEngine) -> None:
        async with async_sessionmaker(engine, autobegin=False)() as session:
            with pytest.raises(NoTransactionError, match="session has no transaction"):
                await publish(session, "Orders", {}, outbox=outbox)
        async with engine.connect() as conn:
            with pytest.raises(NoTransactionError, match="connection has no transaction"):
                await publish(conn, "Orders", {}, outbox=outbox)

    _run(create_async_engine(async_url), work)
    assert _rows(sync_url) == []


@pytest.mark.timeout(60)
def test_at_commit_rides_on_psycopg_async_and_is_written_at_once_elsewhere(
        urls: tuple[str, str]) -> None:
    sync_url, async_url = urls
    outbox = Outbox(engine=create_engine(sync_url))
    rides = "+psycopg_async:" in async_url

    async def work(engine: AsyncEngine) -> tuple[int, int]:
        async with async_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("INSERT INTO orders (id, item) VALUES (7, 'r')"))
            await publish(session, "Orders", {"ref": "r"}, outbox=outbox, at_commit=True)
            held = await session.run_sync(lambda s: queued(s.connection()))
            visible = (await session.execute(select(t.c.tx_id))).all()
        return held, len(visible)

    held, visible = _run(create_async_engine(async_url), work)
    assert (held, visible) == ((1, 0) if rides else (0, 1))
    [row] = _rows(sync_url)
    assert row.body == b'{"ref":"r"}'


@pytest.mark.timeout(60)
def test_a_ride_that_fails_at_commit_commits_nothing(urls: tuple[str, str]) -> None:
    """psycopg async: the held row fails inside the COMMIT's query (a duplicate tx_id);
    ``commit()`` raises, the business row is rolled back, the connection stays usable."""
    sync_url, async_url = urls
    if "+psycopg_async:" not in async_url:
        pytest.skip("the ride is psycopg's")
    outbox = Outbox(engine=create_engine(sync_url))

    async def work(engine: AsyncEngine) -> int:
        sessions = async_sessionmaker(engine)
        async with sessions() as session, session.begin():
            await publish(session, "Orders", {"n": 1}, outbox=outbox, tx_id="DUP")
        async with sessions() as session:
            await session.begin()
            await session.execute(text("INSERT INTO orders (id, item) VALUES (9, 'lost')"))
            await publish(session, "Orders", {"n": 2}, outbox=outbox, tx_id="DUP",
                          at_commit=True)
            with pytest.raises(DBAPIError, match="rocketbox_publish"):
                await session.commit()
        async with sessions() as session:  # the pool's connection is clean
            return int((await session.execute(text("SELECT count(*) FROM orders"))).scalar())

    assert _run(create_async_engine(async_url, pool_size=1), work) == 0
    assert [r.tx_id for r in _rows(sync_url)] == ["DUP"]
