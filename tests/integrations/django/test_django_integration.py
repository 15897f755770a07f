"""The Django app with real commits: SQLite aliases and PostgreSQL, over real HTTP.

Django is configured here, once per process (pytest-django is not used):
``default`` and ``orders`` are SQLite files (``orders`` with
``ATOMIC_REQUESTS``); PostgreSQL tests add a ``pg`` alias on a fresh
database. Views are served by werkzeug's server around Django's
``WSGIHandler``.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.conf import settings

_TMP = Path(tempfile.mkdtemp(prefix="rocketbox-django-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)  # settings live as long as the process
if not settings.configured:
    settings.configure(
        DEBUG=False, SECRET_KEY="rocketbox-tests", ALLOWED_HOSTS=["*"], USE_TZ=True,
        ROOT_URLCONF=__name__, MIDDLEWARE=[],
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth",
                        "django.contrib.sessions", "django.contrib.messages",
                        "django.contrib.admin", "integrations.django"],
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3",
                        "NAME": str(_TMP / "default.sqlite"),
                        "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
            "orders": {"ENGINE": "django.db.backends.sqlite3",
                       "NAME": str(_TMP / "orders.sqlite"), "ATOMIC_REQUESTS": True,
                       "OPTIONS": {"transaction_mode": "IMMEDIATE"}},
        },
        ROCKETBOX={"CELERY_BROKER": ""},
    )
    django.setup()

from asgiref.sync import sync_to_async  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.checks import run_checks  # noqa: E402
from django.core.handlers.wsgi import WSGIHandler  # noqa: E402
from django.core.management import CommandError, call_command  # noqa: E402
from django.db import connections, transaction  # noqa: E402
from django.http import HttpRequest, HttpResponse, JsonResponse  # noqa: E402
from django.test.utils import override_settings  # noqa: E402
from django.urls import path  # noqa: E402
from django.views import View  # noqa: E402
from integrations_support import (  # noqa: E402
    Collector,
    broker_records,
    commit_counts,
    http,
    mentioned,
    queued_relay_tasks,
    relay_all,
)
from sqlalchemy import create_engine, inspect, text  # noqa: E402
from support import BrokerLiteServer, PostgresServer, wait_until  # noqa: E402

from integrations.django import (  # noqa: E402
    TransactionalMessageMixin,
    apublish,
    publish,
    transactional_message,
)
from integrations.django.conf import reset, state  # noqa: E402
from integrations.django.db import sqlalchemy_connection  # noqa: E402
from outbox import migrate  # noqa: E402
from outbox import publish as outbox_publish  # noqa: E402
from outbox.at_commit import queued  # noqa: E402

TOPIC = "DjangoOrders"


def _insert(alias: str, order_id: int, item: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute("INSERT INTO orders (id, item) VALUES (%s, %s)", [order_id, item])


def _order_view(alias: str | None) -> Any:
    @transactional_message(topic=TOPIC, tag="OrderCreated", using=alias,
                           body=lambda response: json.loads(response.content),
                           keys=lambda response: str(json.loads(response.content)["id"]))
    def view(request: HttpRequest) -> HttpResponse:
        payload = json.loads(request.body)
        _insert(alias or str(state().options["DATABASE"]), payload["id"], payload["item"])
        if payload.get("explode"):
            raise RuntimeError("boom")
        if payload.get("reject"):
            return JsonResponse({"error": "rejected"}, status=422)
        return JsonResponse({"id": payload["id"], "item": payload["item"]}, status=201)

    return view


@transactional_message(topic=TOPIC, tag="Line")
def batch(request: HttpRequest) -> HttpResponse:
    ids = [publish(None, {"line": i}, keys=f"line-{i}") for i in range(3)]
    return JsonResponse({"tx_ids": ids})


@transactional_message(topic=TOPIC, tag="Half", mode="half_first",
                       body=lambda response: json.loads(response.content))
def half(request: HttpRequest) -> HttpResponse:
    payload = json.loads(request.body)
    _insert(str(state().options["DATABASE"]), payload["id"], "half")
    if payload.get("explode"):
        raise RuntimeError("boom")
    return JsonResponse({"id": payload["id"]})


@transactional_message(topic=TOPIC, tag="HalfPg", mode="half_first", using="pg",
                       body=lambda response: json.loads(response.content))
def half_on_pg(request: HttpRequest) -> HttpResponse:
    payload = json.loads(request.body)
    _insert("pg", payload["id"], "half")
    return JsonResponse({"id": payload["id"]})


class ClassOrder(TransactionalMessageMixin, View):
    rocketbox_topic = TOPIC
    rocketbox_tag = "ClassBased"

    def post(self, request: HttpRequest) -> HttpResponse:
        payload = json.loads(request.body)
        _insert(str(state().options["DATABASE"]), payload["id"], "cbv")
        publish(None, {"id": payload["id"]})
        return JsonResponse({"id": payload["id"]}, status=201)


def outside(request: HttpRequest) -> HttpResponse:
    try:
        publish(TOPIC, {"x": 1})
    except Exception as exc:
        return JsonResponse({"error": str(exc)})
    return JsonResponse({"error": ""})


@transaction.non_atomic_requests(using="orders")  # Django: no ATOMIC_REQUESTS on async views
@transactional_message(topic=TOPIC, tag="Async",
                       body=lambda response: json.loads(response.content))
async def async_order(request: HttpRequest) -> HttpResponse:
    """An async view: async ORM-style work through the connection, and apublish()."""
    payload = json.loads(request.body)
    await sync_to_async(_insert)(str(state().options["DATABASE"]), payload["id"], "async")
    for line in range(int(payload.get("lines", 0))):
        await apublish(None, {"id": payload["id"], "line": line}, tag="Line")
    if payload.get("explode"):
        raise RuntimeError("boom")
    if payload.get("reject"):
        return JsonResponse({"error": "rejected"}, status=422)
    return JsonResponse({"id": payload["id"]}, status=201)


urlpatterns = [
    path("async-orders", async_order),
    path("orders", _order_view(None)),
    path("orders-on/orders", _order_view("orders")),
    path("orders-on/pg", _order_view("pg")),
    path("batch", batch),
    path("half", half),
    path("half-on/pg", half_on_pg),
    path("class-orders", ClassOrder.as_view()),
    path("outside", outside),
]


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
    from integrations_support import serve_wsgi

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

    from support.asgi import serve_asgi

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
