"""``publish(..., at_commit=True)``: the row travels in the same query as the COMMIT.

Real PostgreSQL (psycopg 3), migrated with rocketbox's own migrations, so
``rocketbox_publish()`` exists; SQLite and a database at revision 0001 show
the fallback (the row is written at once).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from outbox import InvalidMessageError, Outbox, migrate, publish
from outbox.at_commit import queued
from outbox.models import transaction_table as t
from outbox.publish import PARAMETERS
from tests.support import PostgresServer, wait_until
from tests.support.sqlite import sqlite_outbox_engine

ODD = "it's \\ 100% $$ $rocketbox$ ü 🚀 '); DROP TABLE orders; --"
#: a topic holds only [%|a-zA-Z0-9_-] (publish() refuses others): all of those
TOPIC = "%RETRY%a|b_c-9"


def _engine(server: PostgresServer, revision: str = "head") -> Engine:
    db = server.create_database(f"rbac_{uuid.uuid4().hex[:12]}")
    engine = create_engine(db.url, pool_size=2)
    migrate.upgrade(engine, revision)
    with engine.begin() as conn:
        conn.execute(text(
            "CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL, "
            "CONSTRAINT orders_ref_unique UNIQUE (ref) DEFERRABLE INITIALLY DEFERRED)"))
    return engine


@pytest.fixture
def engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    engine = _engine(postgres_server)
    yield engine
    engine.dispose()


@pytest.fixture
def statements(engine: Engine) -> list[str]:
    """Every statement the engine sends, in order."""
    seen: list[str] = []

    def record(conn: Connection, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return seen


def _rows(engine: Engine) -> dict[str, Any]:
    with engine.connect() as conn:
        return {row.tx_id: row for row in conn.execute(select(t))}


def _orders(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT ref FROM orders ORDER BY id")).scalars())


@pytest.mark.timeout(60)
def test_the_row_is_sent_with_the_commit(engine: Engine, statements: list[str]) -> None:
    outbox = Outbox(engine=engine)
    with engine.connect() as conn:
        conn.begin()
        conn.execute(text("INSERT INTO orders (ref) VALUES ('a-1')"))
        xid = conn.execute(text("SELECT pg_current_xact_id()::text::bigint")).scalar()
        tx_id = publish(conn, "Orders", {"ref": "a-1"}, outbox=outbox, tag="OrderCreated",
                        keys=["a-1", "k2"], headers={"trace": "t-1"}, at_commit=True)
        assert queued(conn) == 1
        # not in the table yet: it is written by the COMMIT's query
        assert conn.execute(select(t.c.tx_id)).all() == []
        conn.commit()
        assert queued(conn) == 0
    # nothing went through SQLAlchemy's execute: the row travelled with the COMMIT
    assert [s for s in statements if s.startswith("INSERT INTO rocketbox_transaction")] == []
    row = _rows(engine)[tx_id]
    assert (row.topic, row.tag, row.keys, row.headers, row.state, row.body) == (
        "Orders", "OrderCreated", "a-1 k2", {"trace": "t-1"}, "COMMIT", b'{"ref":"a-1"}')
    assert row.pg_xid == xid and row.seq > 0 and row.next_attempt_at == row.created_at
    assert row.producer_group == outbox.producer_group and row.relayed_at is None
    assert _orders(engine) == ["a-1"]


@pytest.mark.timeout(60)
def test_every_value_comes_back_exactly(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    body = bytes(range(256)) * 3
    with engine.begin() as conn:
        tx_id = publish(conn, TOPIC, body, outbox=outbox, tag=ODD, keys=ODD,
                        message_group=ODD, headers={ODD: ODD}, at_commit=True)
        other = publish(conn, "Orders", {"n": 2}, outbox=outbox, at_commit=True)
        assert queued(conn) == 2
    rows = _rows(engine)
    row = rows[tx_id]
    assert (row.topic, row.tag, row.keys, row.message_group, row.headers, row.body) == (
        TOPIC, ODD, ODD, ODD, {ODD: ODD}, body)
    assert rows[other].seq > row.seq  # two rows in one COMMIT: in publish order
    assert _orders(engine) == []  # and the table the "injection" names is still there


@pytest.mark.timeout(60)
def test_a_failing_commit_commits_neither_row(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO orders (ref) VALUES ('dup')"))
    with engine.connect() as conn:
        conn.begin()
        conn.execute(text("INSERT INTO orders (ref) VALUES ('dup')"))  # checked at COMMIT
        publish(conn, "Orders", {"ref": "dup"}, outbox=outbox, at_commit=True)
        assert queued(conn) == 1
        with pytest.raises(IntegrityError, match="orders_ref_unique"):
            conn.commit()
        conn.rollback()
        assert queued(conn) == 0
        # the same connection goes on working, and the failed row is not sent again
        conn.begin()
        conn.execute(text("INSERT INTO orders (ref) VALUES ('next')"))
        later = publish(conn, "Orders", {"ref": "next"}, outbox=outbox, at_commit=True)
        conn.commit()
    assert set(_rows(engine)) == {later}
    assert _orders(engine) == ["dup", "next"]


@pytest.mark.timeout(60)
def test_a_rollback_drops_the_queued_row(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    with engine.connect() as conn:
        conn.begin()
        publish(conn, "Orders", {"n": 1}, outbox=outbox, at_commit=True)
        assert queued(conn) == 1
        conn.rollback()
        assert queued(conn) == 0
        conn.begin()
        conn.execute(text("INSERT INTO orders (ref) VALUES ('after')"))
        conn.commit()
    assert _rows(engine) == {}
    assert _orders(engine) == ["after"]


@pytest.mark.timeout(60)
def test_inside_a_savepoint_the_row_is_written_at_once(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    with engine.connect() as conn:
        conn.begin()
        kept = publish(conn, "Orders", {"n": 1}, outbox=outbox)
        savepoint = conn.begin_nested()
        dropped = publish(conn, "Orders", {"n": 2}, outbox=outbox, at_commit=True)
        assert queued(conn) == 0
        assert conn.execute(select(t.c.tx_id).where(t.c.tx_id == dropped)).scalar() == dropped
        savepoint.rollback()
        conn.commit()
    assert set(_rows(engine)) == {kept}


@pytest.mark.timeout(60)
def test_without_the_function_the_row_is_written_at_once(
        postgres_server: PostgresServer) -> None:
    engine = _engine(postgres_server, revision="0001")
    try:
        outbox = Outbox(engine=engine)
        with engine.begin() as conn:
            tx_id = publish(conn, "Orders", {"n": 1}, outbox=outbox, at_commit=True)
            assert queued(conn) == 0
            assert conn.execute(select(t.c.tx_id)).scalar() == tx_id
        with engine.connect() as conn:  # revision 0001 has none of 0004's half-id columns
            assert list(conn.execute(select(t.c.tx_id)).scalars()) == [tx_id]
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_sqlite_writes_the_row_at_once(tmp_path: Path) -> None:
    engine = sqlite_outbox_engine(tmp_path / "outbox.sqlite")
    try:
        with engine.begin() as conn:
            tx_id = publish(conn, "Orders", {"n": 1}, outbox=Outbox(engine=engine),
                            at_commit=True)
            assert queued(conn) == 0
            assert conn.execute(select(t.c.tx_id)).scalar() == tx_id
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_a_message_group_still_commits_in_seq_order(engine: Engine) -> None:
    """The function takes the group's advisory lock, as publish() does: seq follows commits."""
    outbox = Outbox(engine=engine)
    ids: dict[str, str] = {}
    with engine.connect() as first:
        first.begin()
        ids["first"] = publish(first, "Orders", {"n": 1}, outbox=outbox, message_group="g-1")

        def second() -> None:
            with engine.begin() as conn:
                ids["second"] = publish(conn, "Orders", {"n": 2}, outbox=outbox,
                                        message_group="g-1", at_commit=True)
                ids["held"] = str(queued(conn))

        thread = threading.Thread(target=second)
        thread.start()
        with engine.connect() as probe:
            wait_until(lambda: probe.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND NOT granted")).scalar() == 1, timeout=20,
                message="the second commit never waited for the group's lock")
        first.commit()
        thread.join(timeout=20)
        assert not thread.is_alive()
    rows = _rows(engine)
    assert ids["held"] == "1"
    assert rows[ids["first"]].seq < rows[ids["second"]].seq


@pytest.mark.timeout(60)
def test_a_failure_in_the_function_leaves_no_open_transaction_behind(engine: Engine) -> None:
    """SQLAlchemy sends no ROLLBACK after a failed commit: the pool must not get an open one."""
    outbox = Outbox(engine=engine)
    with engine.connect() as conn:
        conn.begin()
        conn.execute(text("INSERT INTO orders (ref) VALUES ('lost')"))
        publish(conn, "Orders", {"n": 1}, outbox=outbox, tx_id="T" * 200,  # too long
                at_commit=True)
        assert queued(conn) == 1
        with pytest.raises(DBAPIError, match="too long") as failed:
            conn.commit()
        assert "rocketbox_publish(...) x1" in str(failed.value)  # no values in the message
        assert "TTTT" not in str(failed.value)
    # the same pooled connection, next user: nothing of the failed transaction commits
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO orders (ref) VALUES ('next')"))
    assert _orders(engine) == ["next"]
    assert _rows(engine) == {}


@pytest.mark.timeout(60)
def test_bad_values_fail_in_publish_or_are_written_at_once(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    with engine.connect() as conn:
        conn.begin()
        with pytest.raises(TypeError, match="JSON serializable"):
            publish(conn, "Orders", {"n": 1}, outbox=outbox, headers={"x": object()},
                    at_commit=True)
        assert queued(conn) == 0
        # a value the broker cannot hold (a lone surrogate is no UTF-8) fails here too
        with pytest.raises(InvalidMessageError, match="invalid keys: not encodable as UTF-8"):
            publish(conn, "Orders", {"n": 1}, outbox=outbox, keys="\ud800", at_commit=True)
        assert queued(conn) == 0
        # a NUL would cut the query text short: the row takes the INSERT, which refuses
        with pytest.raises(DBAPIError, match="NUL"):
            publish(conn, "Orders", {"n": 1}, outbox=outbox, tag="a\x00b", at_commit=True)
        assert queued(conn) == 0
        conn.rollback()
    assert _rows(engine) == {}


@pytest.mark.timeout(60)
def test_autocommit_writes_at_once(engine: Engine) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        with conn.begin():
            tx_id = publish(conn, "Orders", {"n": 1}, outbox=Outbox(engine=engine),
                            at_commit=True)
            assert queued(conn) == 0
        assert set(_rows(engine)) == {tx_id}


@pytest.mark.timeout(60)
def test_rides_with_psycopg_preparing_every_statement(postgres_server: PostgresServer) -> None:
    db = postgres_server.create_database(f"rbac_{uuid.uuid4().hex[:12]}")
    engine = create_engine(db.url, connect_args={"prepare_threshold": 0})
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            tx_id = publish(conn, "Orders", {"n": 1}, outbox=Outbox(engine=engine),
                            at_commit=True)
            assert queued(conn) == 1
        assert set(_rows(engine)) == {tx_id}
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_the_function_writes_every_column_publish_writes(engine: Engine) -> None:
    """0002 is a frozen copy: a column publish() sets that the function lacks would be lost."""
    with engine.connect() as conn:
        source = conn.execute(text(
            "SELECT prosrc FROM pg_proc WHERE proname = 'rocketbox_publish'")).scalar_one()
    columns = re.search(r"INSERT INTO rocketbox_transaction \(([^)]*)\)", source)
    assert columns is not None
    written = {c.strip() for c in columns.group(1).split(",")}
    assert written == {*PARAMETERS, "seq", "pg_xid"}


@pytest.mark.timeout(60)
def test_values_come_back_exactly_whatever_standard_conforming_strings_says(
        engine: Engine) -> None:
    """Off, a backslash in '...' is an escape: the literals must read the same either way,
    even when the setting changes between publish() and the COMMIT."""
    outbox = Outbox(engine=engine)
    ids = {}
    with engine.connect() as conn, conn.begin():
        ids["on"] = publish(conn, "Orders", {"n": ODD}, outbox=outbox, tag=ODD, keys=ODD,
                            headers={ODD: ODD}, at_commit=True)
        conn.exec_driver_sql("SET LOCAL standard_conforming_strings = off")
        ids["off"] = publish(conn, "Orders", {"n": ODD}, outbox=outbox, tag=ODD, keys=ODD,
                             headers={ODD: ODD}, at_commit=True)
        assert queued(conn) == 2
    rows = _rows(engine)
    for tx_id in ids.values():
        row = rows[tx_id]
        assert (row.tag, row.keys, row.headers) == (ODD, ODD, {ODD: ODD})
    assert _orders(engine) == []


@pytest.mark.timeout(60)
def test_a_held_row_keeps_the_transactions_read_only_setting(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    with engine.begin() as conn:  # the function's presence is known: nothing else is sent
        publish(conn, "Orders", {"n": 1}, outbox=outbox, at_commit=True)
    with engine.connect().execution_options(postgresql_readonly=True) as conn:
        conn.begin()
        publish(conn, "Orders", {"n": 2}, outbox=outbox, at_commit=True)
        assert queued(conn) == 1  # the only statement of its transaction
        with pytest.raises(DBAPIError, match="read-only transaction"):
            conn.commit()
    assert len(_rows(engine)) == 1


@pytest.mark.timeout(60)
def test_in_psycopg_pipeline_mode_the_row_is_written_at_once(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.begin()
        with conn.connection.dbapi_connection.pipeline():  # type: ignore[union-attr]
            tx_id = publish(conn, "Orders", {"n": 1}, outbox=Outbox(engine=engine),
                            at_commit=True)
            assert queued(conn) == 0  # the COMMIT's query cannot go out inside a pipeline
        conn.commit()
    assert set(_rows(engine)) == {tx_id}


@pytest.mark.timeout(60)
def test_a_connection_lost_before_the_commit_commits_nothing(engine: Engine) -> None:
    outbox = Outbox(engine=engine)
    with engine.connect() as conn:
        conn.begin()
        conn.execute(text("INSERT INTO orders (ref) VALUES ('gone')"))
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        publish(conn, "Orders", {"ref": "gone"}, outbox=outbox, at_commit=True)
        # autocommit: pg_stat_activity is a snapshot per transaction, so polls inside
        # one transaction would keep seeing a backend that has exited since
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            wait_until(lambda: other.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
            ).scalar_one() == 0, message="the backend did not exit")
        with pytest.raises(DBAPIError) as failed:
            conn.commit()
        assert failed.value.connection_invalidated
        assert queued(conn) == 0
    assert _orders(engine) == []
    assert _rows(engine) == {}
