"""The Alembic migrations against real SQLite files and real PostgreSQL databases.

They must create exactly what ``outbox.models`` declares (``check`` is clean,
and the schema equals ``metadata.create_all``'s), round-trip through
downgrade, leave an application's own tables and Alembic history alone, and
``check`` must be able to fail.
"""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect, select, text

import migrations
from outbox import migrate
from outbox.config import Outbox
from outbox.models import TRANSACTION_FILLFACTOR, metadata
from outbox.models import transaction_table as t
from outbox.publish import publish
from tests.outbox.migrations.migration_schema_support import (
    functions,
    rocketbox_tables,
    schema_snapshot,
    sequences,
)
from tests.support import PostgresServer

TABLES = ["rocketbox_broker_state", "rocketbox_inbox", "rocketbox_transaction"]


@contextlib.contextmanager
def _engine(url: str) -> Iterator[Engine]:
    """An engine on ``url``, disposed of on the way out."""
    engine = create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_upgrade_downgrade_upgrade_round_trip(db_url: str) -> None:
    with _engine(db_url) as engine:
        assert migrate.current(db_url) is None
        migrate.upgrade(db_url)
        assert migrate.current(db_url) == "0007" == migrate.heads()[0]
        assert rocketbox_tables(engine) == TABLES
        first = schema_snapshot(engine)
        if engine.dialect.name == "postgresql":
            assert sequences(engine) == ["rocketbox_transaction_seq"]
            [(name, _args)] = functions(engine)
            assert name == "rocketbox_publish"

        migrate.downgrade(db_url, "0002")
        assert rocketbox_tables(engine) == [t for t in TABLES if t != "rocketbox_broker_state"]
        migrate.downgrade(db_url, "0001")
        assert functions(engine) == []
        assert "rocketbox_transaction" in rocketbox_tables(engine)  # 0002 added no table
        migrate.downgrade(db_url, "base")
        assert migrate.current(db_url) is None
        assert rocketbox_tables(engine) == []
        assert sequences(engine) == []

        migrate.upgrade(db_url)
        assert migrate.current(db_url) == "0007"
        assert schema_snapshot(engine) == first
        assert migrate.check(db_url) == []


@pytest.mark.timeout(60)
def test_check_is_clean_after_upgrade(db_url: str) -> None:
    migrate.upgrade(db_url)
    assert migrate.check(db_url) == []


@pytest.mark.timeout(60)
def test_check_reports_hand_made_changes(db_url: str) -> None:
    migrate.upgrade(db_url)
    with _engine(db_url) as engine:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE rocketbox_inbox ADD COLUMN note VARCHAR(20)"))
        assert "remove_column: rocketbox_inbox.note" in migrate.render_diffs(
            migrate.check(engine))

        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE rocketbox_inbox DROP COLUMN note"))
            conn.execute(text("DROP INDEX ix_rocketbox_inbox_processed_at"))
        assert migrate.render_diffs(migrate.check(engine)) == [
            "add_index: rocketbox_inbox.ix_rocketbox_inbox_processed_at"]

        # the partial index's predicate: Alembic alone would not notice this one
        with engine.begin() as conn:
            conn.execute(text("CREATE INDEX ix_rocketbox_inbox_processed_at "
                              "ON rocketbox_inbox (processed_at)"))
            conn.execute(text("DROP INDEX ix_rocketbox_transaction_pending"))
            conn.execute(text("CREATE INDEX ix_rocketbox_transaction_pending "
                              "ON rocketbox_transaction (next_attempt_at) "
                              "WHERE relayed_at IS NULL"))
        assert migrate.render_diffs(migrate.check(engine)) == [
            "remove_index: rocketbox_transaction.ix_rocketbox_transaction_pending",
            "add_index: rocketbox_transaction.ix_rocketbox_transaction_pending"]


@pytest.mark.timeout(60)
def test_check_reports_a_changed_server_default(postgres_server: PostgresServer) -> None:
    # PostgreSQL only: SQLite cannot change a column's default in place
    db_url = postgres_server.create_database(f"mig_{uuid.uuid4().hex[:12]}").url
    migrate.upgrade(db_url)
    with _engine(db_url) as engine:
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE rocketbox_transaction "
                              "ALTER COLUMN attempts SET DEFAULT 1"))
        assert migrate.render_diffs(migrate.check(engine)) == [
            "modify_default: rocketbox_transaction.attempts (1 -> 0)"]


@pytest.mark.timeout(60)
def test_application_tables_and_alembic_history_are_left_alone(db_url: str) -> None:
    with _engine(db_url) as engine:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)"))
            conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) "
                              "NOT NULL PRIMARY KEY)"))
            conn.execute(text("INSERT INTO alembic_version VALUES ('app_rev_42')"))
        migrate.upgrade(db_url)
        assert migrate.check(db_url) == []  # `orders` is not offered for dropping
        migrate.downgrade(db_url, "base")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() \
                == "app_rev_42"
        assert {"orders", "alembic_version"} <= set(inspect(engine).get_table_names())


@pytest.mark.timeout(60)
def test_migrated_schema_equals_create_all(db_url: str, other_db_url: str) -> None:
    with _engine(db_url) as migrated, _engine(other_db_url) as created:
        migrate.upgrade(migrated)
        metadata.create_all(created)
        assert schema_snapshot(migrated) == schema_snapshot(created)
        assert set(schema_snapshot(migrated)) == set(TABLES)
        indexes = {ix[0]: ix for ix in schema_snapshot(migrated)["rocketbox_transaction"]
                   ["indexes"]}
        assert indexes["ix_rocketbox_transaction_pending"][3] == \
            "relayed_at is null and not parked"
        assert indexes["ix_rocketbox_transaction_group_seq"][3] == "relayed_at is null"
        if migrated.dialect.name == "postgresql":  # room on each page for the claims (0007)
            assert schema_snapshot(migrated)["rocketbox_transaction"]["storage"] == \
                [f"fillfactor={TRANSACTION_FILLFACTOR}"]


@pytest.mark.timeout(60)
def test_check_refuses_a_database_not_at_head(db_url: str) -> None:
    with pytest.raises(migrate.MigrationError, match="not up to date"):
        migrate.check(db_url)


@pytest.mark.timeout(60)
def test_a_connection_target_runs_in_the_callers_transaction(db_url: str) -> None:
    with _engine(db_url) as engine:
        with engine.begin() as conn:
            migrate.upgrade(conn)
            assert migrate.current(conn) == "0007"
        assert migrate.current(engine) == "0007"
        assert rocketbox_tables(engine) == TABLES


@pytest.mark.timeout(60)
def test_postgresql_migrations_roll_back_with_the_callers_transaction(
        postgres_server: PostgresServer) -> None:
    with _engine(postgres_server.create_database(f"mig_{uuid.uuid4().hex[:12]}").url) as engine:
        with engine.connect() as conn:
            conn.begin()
            migrate.upgrade(conn)
            assert migrate.current(conn) == "0007"
            conn.rollback()
        assert migrate.current(engine) is None  # transactional DDL: nothing is left
        assert rocketbox_tables(engine) == []
        assert sequences(engine) == []
        assert functions(engine) == []


@pytest.mark.timeout(60)
def test_publish_works_on_a_migrated_database(db_url: str) -> None:
    with _engine(db_url) as engine:
        migrate.upgrade(engine)
        outbox = Outbox(engine=engine)
        with engine.begin() as conn:
            first = publish(conn, "orders", {"n": 1}, outbox=outbox)
            second = publish(conn, "orders", {"n": 2}, outbox=outbox)
        with engine.connect() as conn:
            seqs = dict(conn.execute(select(t.c.tx_id, t.c.seq)).all())
        assert seqs[first] < seqs[second]


@pytest.mark.parametrize("url, sequence", [
    ("postgresql+psycopg://nobody@127.0.0.1:1/none", True),  # nothing listens: no connect
    ("sqlite:////nonexistent-dir/app.db", False),
])
@pytest.mark.timeout(30)
def test_offline_sql_needs_no_database(url: str, sequence: bool) -> None:
    out = io.StringIO()
    migrate.upgrade(url, sql=True, output=out)
    sql = out.getvalue()
    assert "CREATE TABLE rocketbox_transaction" in sql
    assert "CREATE TABLE rocketbox_inbox" in sql
    assert "WHERE relayed_at IS NULL AND NOT parked" in sql
    assert "INSERT INTO rocketbox_alembic_version" in sql
    assert ("CREATE SEQUENCE rocketbox_transaction_seq" in sql) is sequence

    out = io.StringIO()
    migrate.downgrade(url, "head:base", sql=True, output=out)
    assert "DROP TABLE rocketbox_transaction" in out.getvalue()


@pytest.mark.timeout(30)
def test_the_script_location_is_the_installed_package() -> None:
    location = migrations.script_location()
    assert location == Path(migrations.__file__).parent
    for name in ("env.py", "script.py.mako", "partial_where.py", "versions/0001_initial.py",
                 "versions/0002_publish_function.py", "versions/0003_broker_state.py",
                 "versions/0004_rocketmq_half_ids.py", "versions/0005_broker_state_reporter.py",
                 "versions/0006_broker_position.py", "versions/0007_transaction_fillfactor.py"):
        assert (location / name).is_file(), name
    assert migrate.heads() == ("0007",)
    assert migrate.make_config().get_main_option("version_table") == \
        migrations.VERSION_TABLE


@pytest.mark.timeout(30)
def test_a_bad_url_is_a_configuration_error() -> None:
    from outbox.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="cannot parse database URL"):
        migrate.upgrade("not a url")
    with pytest.raises(ConfigurationError, match="unknown database driver"):
        migrate.upgrade("nosuchdb://host/db")


@pytest.mark.timeout(30)
def test_sqlite_engines_use_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    """The web app, the relay and the responder write one file: writers must queue."""
    engine = migrate.engine_for(f"sqlite:///{tmp_path / 'app.sqlite'}")
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        engine.dispose()
