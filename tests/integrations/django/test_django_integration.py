"""The Django app with real commits: SQLite aliases and PostgreSQL, over real HTTP.

The site (settings, views, URLs) is :mod:`django_site`; its views are served by
werkzeug's server around Django's ``WSGIHandler``.
"""

from __future__ import annotations

# configures Django before the imports below
from tests.integrations.django import django_site  # noqa: F401

# isort: split

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.checks import run_checks
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test.utils import override_settings
from sqlalchemy import create_engine, inspect, text

from integrations.django.conf import reset, state
from integrations.django.db import sqlalchemy_connection
from outbox import migrate
from outbox import publish as outbox_publish
from outbox.at_commit import queued
from tests.integrations.django.django_site import TOPIC
from tests.integrations.integrations_support import (
    Collector,
    broker_records,
    commit_counts,
    http,
    mentioned,
    queued_relay_tasks,
    relay_all,
)
from tests.support import BrokerLiteServer, PostgresServer, wait_until

# -- fixtures ---------------------------------------------------------------------------


def _fresh(alias: str) -> None:
    """The alias's database with rocketbox's migration applied and an empty orders table."""
    call_command("migrate", "rocketbox", database=alias, verbosity=0)
    with connections[alias].cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS orders")
        cursor.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
        cursor.execute("DELETE FROM rocketbox_transaction")


def _orders(alias: str) -> set[int]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT id FROM orders")
        return {row[0] for row in cursor.fetchall()}


def _rows(alias: str) -> list[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT tx_id FROM rocketbox_transaction ORDER BY seq")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def site(broker: BrokerLiteServer) -> Iterator[str]:
    """The Django site over HTTP, ROCKETBOX pointing at the test's broker."""
    from tests.integrations.integrations_support import serve_wsgi

    for alias in ("default", "orders"):
        _fresh(alias)
    with override_settings(ROCKETBOX={"BROKER": broker.native, "CELERY_BROKER": ""}), \
            serve_wsgi(WSGIHandler()) as address:
        yield address
    reset()
    connections.close_all()


@pytest.fixture
def pg_alias(postgres_server: PostgresServer) -> Iterator[str]:
    import uuid

    db = postgres_server.create_database(f"rbdj_{uuid.uuid4().hex[:10]}")
    configured = connections.configure_settings({
        "default": dict(connections.settings["default"]),
        "pg": {"ENGINE": "django.db.backends.postgresql", "NAME": db.dbname, "USER": db.user,
               "HOST": db.host, "PORT": str(db.port)}})["pg"]
    connections.settings["pg"] = configured
    settings.DATABASES["pg"] = configured
    try:
        yield "pg"
    finally:
        connections["pg"].close()
        connections.settings.pop("pg", None)
        settings.DATABASES.pop("pg", None)
        reset()


# -- tests -------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_commit_sends_one_message_exception_and_4xx_send_none(
        site: str, broker: BrokerLiteServer) -> None:
    with Collector(broker.native, TOPIC, "dj-it") as got:
        assert http(site, "POST", "/orders", {"id": 1, "item": "tea"})[0] == 201
        assert http(site, "POST", "/orders", {"id": 2, "item": "x", "explode": True})[0] == 500
        assert http(site, "POST", "/orders", {"id": 3, "item": "x", "reject": True})[0] == 422
        assert _orders("default") == {1}
        [tx_id] = _rows("default")
        assert relay_all(state().base_outbox) == 1
        got.wait_for_keys([tx_id])
        assert got.messages[0].body == b'{"id":1,"item":"tea"}'
        assert got.messages[0].keys == ("1",)
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx_id: 1} and mentioned(records) == {tx_id}


@pytest.mark.timeout(60)
def test_several_publishes_and_the_class_based_mixin(site: str,
                                                      broker: BrokerLiteServer) -> None:
    status, body = http(site, "POST", "/batch")
    assert status == 200 and len(body["tx_ids"]) == 3
    assert http(site, "POST", "/class-orders", {"id": 5})[0] == 201
    assert _rows("default")[:3] == body["tx_ids"] and len(_rows("default")) == 4
    assert relay_all(state().base_outbox) == 4
    assert sum(commit_counts(broker_records(broker.data_dir)).values()) == 4


@pytest.mark.timeout(60)
def test_named_alias_under_atomic_requests(site: str, broker: BrokerLiteServer) -> None:
    with override_settings(ROCKETBOX={"BROKER": broker.native, "CELERY_BROKER": "",
                                      "DATABASE": "orders"}):
        assert http(site, "POST", "/orders-on/orders", {"id": 8, "item": "tea"})[0] == 201
        assert http(site, "POST", "/orders-on/orders", {"id": 9, "item": "x",
                                                        "reject": True})[0] == 422
        assert http(site, "POST", "/orders-on/orders", {"id": 10, "item": "x",
                                                        "explode": True})[0] == 500
        assert _orders("orders") == {8} and _orders("default") == set()
        [tx_id] = _rows("orders")
        assert _rows("default") == []
        assert relay_all(state().base_outbox) == 1
    assert commit_counts(broker_records(broker.data_dir)) == {tx_id: 1}


@pytest.mark.timeout(60)
def test_half_first_mode(site: str, broker: BrokerLiteServer) -> None:
    with Collector(broker.native, TOPIC, "dj-half") as got:
        assert http(site, "POST", "/half", {"id": 20})[0] == 200
        assert http(site, "POST", "/half", {"id": 21, "explode": True})[0] == 500
        [tx_id] = _rows("default")
        got.wait_for_keys([tx_id])
    state().close()
    assert commit_counts(broker_records(broker.data_dir)) == {tx_id: 1}


@pytest.mark.timeout(60)
def test_on_commit_enqueues_the_relay_task_only_after_a_commit(
        site: str, broker: BrokerLiteServer, tmp_path: Path) -> None:
    queue = tmp_path / "celery.sqlite"
    with override_settings(ROCKETBOX={"BROKER": broker.native,
                                      "CELERY_BROKER": f"sqla+sqlite:///{queue}"}):
        assert http(site, "POST", "/orders", {"id": 30, "item": "x", "reject": True})[0] == 422
        assert not queue.exists() or queued_relay_tasks(queue) == []
        assert http(site, "POST", "/orders", {"id": 31, "item": "tea"})[0] == 201
        [tx_id] = _rows("default")
        assert queued_relay_tasks(queue) == [[tx_id]]


@pytest.mark.timeout(30)
def test_publish_outside_a_view_is_a_clear_error(site: str) -> None:
    error = http(site, "GET", "/outside")[1]["error"]
    assert "no @transactional_message view is running" in error


@pytest.mark.timeout(90)
def test_postgres_alias_commits_and_rolls_back(site: str, pg_alias: str,
                                               broker: BrokerLiteServer) -> None:
    _fresh(pg_alias)
    with override_settings(ROCKETBOX={"BROKER": broker.native, "CELERY_BROKER": "",
                                      "DATABASE": pg_alias}):
        assert http(site, "POST", "/orders-on/pg", {"id": 1, "item": "tea"})[0] == 201
        assert http(site, "POST", "/orders-on/pg", {"id": 2, "item": "x", "explode": True})[0] \
            == 500
        assert http(site, "POST", "/orders-on/pg", {"id": 3, "item": "x", "reject": True})[0] \
            == 422
        assert _orders(pg_alias) == {1}
        [tx_id] = _rows(pg_alias)
        with connections[pg_alias].cursor() as cursor:
            cursor.execute("SELECT pg_xid FROM rocketbox_transaction")
            assert cursor.fetchone()[0] is not None
        assert relay_all(state().base_outbox) == 1
        assert http(site, "POST", "/half-on/pg", {"id": 4})[0] == 200
        half_tx = _rows(pg_alias)[-1]
        wait_until(lambda: commit_counts(broker_records(broker.data_dir)).get(half_tx) == 1,
                   timeout=20)
        state().close()
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx_id: 1, half_tx: 1}
    # the half as stored (RocketMQ's model: on the half topic; renewed copies come later)
    half_record = next(r for r in records if r["topic"] == "RMQ_SYS_TRANS_HALF_TOPIC"
                       and r["transaction_id"] == half_tx)
    assert "ROCKETBOX_PG_XID" in json.dumps(half_record)


@pytest.mark.timeout(60)
def test_rows_on_djangos_connection_are_never_held_for_the_commit(pg_alias: str) -> None:
    """Django commits its own connection: ``at_commit=True`` must still write the row at once."""
    _fresh(pg_alias)
    outbox = state().base_outbox
    with transaction.atomic(using=pg_alias), sqlalchemy_connection(pg_alias) as conn:
        tx_id = outbox_publish(conn, "Orders", {"n": 1}, outbox=outbox, at_commit=True)
        assert queued(conn) == 0
        assert _rows(pg_alias) == [tx_id]  # already in the table, inside the transaction
    assert _rows(pg_alias) == [tx_id]


def _schema(url: str) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        inspector = inspect(engine)
        out: dict[str, Any] = {}
        for table in sorted(inspector.get_table_names()):
            if not table.startswith("rocketbox_"):
                continue
            out[table] = {
                "columns": [(c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                            for c in inspector.get_columns(table)],
                "pk": inspector.get_pk_constraint(table),
                "indexes": sorted((i["name"], tuple(i["column_names"]), str(sorted(
                    (k, str(v)) for k, v in i.get("dialect_options", {}).items())))
                    for i in inspector.get_indexes(table)),
            }
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                out["sequences"] = sorted(conn.execute(text(
                    "SELECT sequence_name FROM information_schema.sequences")).scalars())
                out["functions"] = sorted(tuple(row) for row in conn.execute(text(
                    "SELECT proname, pg_get_function_identity_arguments(oid), prosrc "
                    "FROM pg_proc WHERE proname LIKE 'rocketbox%'")).all())
        return out
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_django_migrate_creates_the_alembic_schema_on_sqlite(tmp_path: Path) -> None:
    alembic_url = f"sqlite:///{tmp_path / 'alembic.sqlite'}"
    migrate.upgrade(alembic_url)
    call_command("migrate", "rocketbox", database="default", verbosity=0)
    django_url = f"sqlite:///{settings.DATABASES['default']['NAME']}"
    assert _schema(django_url) == _schema(alembic_url)
    assert "rocketbox_transaction" in _schema(django_url)


@pytest.mark.timeout(90)
def test_django_migrate_creates_the_alembic_schema_on_postgres(
        pg_alias: str, postgres_server: PostgresServer) -> None:
    alembic = postgres_server.create_database("rbdj_alembic_schema")
    migrate.upgrade(alembic.url)
    call_command("migrate", "rocketbox", database=pg_alias, verbosity=0)
    pg = connections[pg_alias].settings_dict
    django_url = (f"postgresql+psycopg://{pg['USER']}@{pg['HOST']}:{pg['PORT']}/{pg['NAME']}")
    assert _schema(django_url) == _schema(alembic.url)
    call_command("migrate", "rocketbox", "zero", database=pg_alias, verbosity=0)
    assert "rocketbox_transaction" not in _schema(django_url)


@pytest.mark.timeout(30)
def test_system_checks_and_commands_refuse_bad_settings() -> None:
    with override_settings(ROCKETBOX={"BROKER": "nowhere", "CELERY_BROKER": ""}):
        ids = {message.id for message in run_checks(tags=["rocketbox"])}
        assert ids == {"rocketbox.E001", "rocketbox.W001"}
    with override_settings(ROCKETBOX={"DATABASE": "missing"}):
        assert {m.id for m in run_checks(tags=["rocketbox"])} == {"rocketbox.E002"}
    with override_settings(ROCKETBOX={"BROKR": "x"}):
        assert {m.id for m in run_checks(tags=["rocketbox"])} == {"rocketbox.E003"}
    with pytest.raises(CommandError, match="parked-limit"):
        call_command("rocketbox_status", "--parked-limit", "-1")
    with override_settings(ROCKETBOX={"CELERY_BROKER": ""}), \
            pytest.raises(CommandError, match="needs a Celery broker"):
        call_command("rocketbox_relay")
    reset()


@pytest.mark.timeout(30)
def test_status_command_prints_json(site: str) -> None:
    import io

    http(site, "POST", "/orders", {"id": 40, "item": "tea"})
    out = io.StringIO()
    call_command("rocketbox_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["totals"]["pending"] == 1


@pytest.mark.timeout(60)
def test_admin_lists_rows_filters_and_replays_parked_ones(site: str) -> None:
    from django.contrib.admin import AdminSite
    from django.test import RequestFactory

    from integrations.django.admin import OutboxMessageAdmin
    from integrations.django.models import OutboxMessage

    assert http(site, "POST", "/batch")[0] == 200
    parked, fine = _rows("default")[:2]
    with connections["default"].cursor() as cursor:
        cursor.execute("UPDATE rocketbox_transaction SET parked = 1, attempts = 10 "
                       "WHERE tx_id = %s", [parked])
    assert OutboxMessage.objects.filter(parked=True).count() == 1
    assert OutboxMessage.objects.filter(state="COMMIT").count() == 3

    class Recording(OutboxMessageAdmin):
        said: list[str] = []

        def message_user(self, request: Any, message: str, *args: Any, **kw: Any) -> None:
            self.said.append(message)

    model_admin = Recording(OutboxMessage, AdminSite())
    queryset = OutboxMessage.objects.filter(tx_id__in=[parked, fine])
    model_admin.replay(RequestFactory().post("/"), queryset)
    assert model_admin.said == ["replayed 1 parked row(s)",
                                "1 row(s) were not parked and were left alone"]
    assert OutboxMessage.objects.filter(parked=True).count() == 0
    out = __import__("io").StringIO()
    call_command("makemigrations", "rocketbox", "--check", "--dry-run", stdout=out)


@pytest.mark.timeout(90)
def test_async_views_commit_with_their_messages_over_asgi(broker: BrokerLiteServer) -> None:
    """An ``async def`` view under uvicorn: commit, raise, 4xx, several messages, and
    concurrent requests on one loop, with no loop stall in rocketbox's code."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.asgi import serve_asgi

    _fresh("default")
    with override_settings(ROCKETBOX={"BROKER": broker.native, "CELERY_BROKER": ""}), \
            serve_asgi(get_asgi_application(), lifespan="off") as server:
        address = server.address
        assert http(address, "POST", "/async-orders", {"id": 1, "lines": 2}) == (201, {"id": 1})
        assert http(address, "POST", "/async-orders", {"id": 2, "lines": 1,
                                                       "explode": True})[0] == 500
        assert http(address, "POST", "/async-orders", {"id": 3, "lines": 1,
                                                       "reject": True})[0] == 422
        assert _orders("default") == {1} and len(_rows("default")) == 3
        with ThreadPoolExecutor(6) as pool:
            statuses = list(pool.map(lambda i: http(address, "POST", "/async-orders",
                                                    {"id": 10 + i})[0], range(12)))
        assert statuses == [201] * 12
        assert _orders("default") == {1, *range(10, 22)} and len(_rows("default")) == 15
        assert server.rocketbox_stalls() == [], server.report()
        assert relay_all(state().base_outbox) == 15
    reset()
    connections.close_all()
