"""The Flask extension through a real HTTP server: commit, rollback, error status, modes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask, abort, request
from sqlalchemy import Engine, create_engine, event, text

from integrations.flask import Rocketbox, publish, state_for, transactional_message
from outbox import NoTransactionError, migrate
from outbox.celery import CelerySettings
from tests.integrations.integrations_support import (
    Collector,
    broker_records,
    commit_counts,
    http,
    mentioned,
    queued_relay_tasks,
    relay_all,
    row_ids,
    serve_wsgi,
)
from tests.support import BrokerLiteServer, PostgresServer, wait_until

TOPIC = "FlaskOrders"


def make_app(database: Any, broker: str, **config: Any) -> Flask:
    app = Flask(__name__)
    app.config.update({"ROCKETBOX_DATABASE": database, "ROCKETBOX_BROKER": broker,
                       "ROCKETBOX_CELERY_BROKER": "", **config})
    rocketbox = Rocketbox(app)

    @app.post("/orders")
    @transactional_message(topic=TOPIC, tag="OrderCreated", body=lambda rv: rv[0],
                           keys=lambda rv: str(rv[0]["id"]))
    def create_order() -> tuple[dict[str, Any], int]:
        payload = request.get_json()
        rocketbox.session.execute(text("INSERT INTO orders (id, item) VALUES (:i, :n)"),
                                  {"i": payload["id"], "n": payload["item"]})
        if payload.get("explode"):
            raise RuntimeError("boom")
        if payload.get("reject"):
            return {"error": "rejected", "id": payload["id"]}, 422
        if payload.get("abort"):
            abort(409)
        return {"id": payload["id"], "item": payload["item"]}, 201

    @app.post("/batch")
    @transactional_message(topic=TOPIC, tag="Line")
    def batch() -> dict[str, Any]:
        ids = [publish(None, {"line": i}, keys=f"line-{i}") for i in range(3)]
        publish("FlaskAudit", {"lines": 3}, tag="Audit")
        return {"tx_ids": ids}

    @app.post("/half")
    @transactional_message(topic=TOPIC, tag="Half", mode="half_first",
                           body=lambda rv: rv)
    def half() -> dict[str, Any]:
        payload = request.get_json()
        rocketbox.session.execute(text("INSERT INTO orders (id, item) VALUES (:i, 'h')"),
                                  {"i": payload["id"]})
        if payload.get("explode"):
            raise RuntimeError("boom")
        return {"id": payload["id"]}

    @app.get("/outside")
    def outside() -> dict[str, str]:
        try:
            publish(TOPIC, {"x": 1})
        except NoTransactionError as exc:
            return {"error": str(exc)}
        return {"error": ""}

    return app


def orders_table(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)"))


def order_ids(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT id FROM orders")).scalars())


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, sqlite_url: str) -> Iterator[Engine]:
    """The app's database: a SQLite file, or a fresh PostgreSQL database (both migrated)."""
    if request.param == "sqlite":
        engine = create_engine(sqlite_url, connect_args={"timeout": 30})
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        engine = create_engine(server.create_database(f"rbfl_{uuid.uuid4().hex[:12]}").url)
        migrate.upgrade(engine)
    orders_table(engine)
    yield engine
    engine.dispose()


def outbox_inserts(engine: Engine) -> list[str]:
    """The outbox INSERTs run through SQLAlchemy, as they happen (not those sent with COMMIT)."""
    seen: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("INSERT INTO rocketbox_transaction"):
            seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    return seen


@pytest.mark.timeout(60)
def test_commit_sends_exactly_one_message_and_failures_send_none(
        engine: Engine, broker: BrokerLiteServer) -> None:
    app = make_app(engine, broker.native)
    outbox = state_for(app).outbox
    inserts = outbox_inserts(engine)
    with serve_wsgi(app) as address, Collector(broker.native, TOPIC, "flask-it") as got:
        assert http(address, "POST", "/orders", {"id": 1, "item": "tea"})[0] == 201
        assert http(address, "POST", "/orders", {"id": 2, "item": "x", "explode": True})[0] \
            == 500
        assert http(address, "POST", "/orders", {"id": 3, "item": "x", "reject": True})[0] \
            == 422
        assert http(address, "POST", "/orders", {"id": 4, "item": "x", "abort": True})[0] \
            == 409
        assert order_ids(engine) == {1}
        [tx_id] = row_ids(engine)
        # on PostgreSQL the body= row went out in the COMMIT's own query instead
        assert len(inserts) == (0 if engine.dialect.name == "postgresql" else 1)
        assert relay_all(outbox) == 1
        got.wait_for_keys([tx_id])
        [message] = got.messages
        assert message.tags == "OrderCreated" and message.keys == ("1",)
        assert message.body == b'{"id":1,"item":"tea"}'
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx_id: 1}
    assert mentioned(records) == {tx_id}


@pytest.mark.timeout(60)
def test_error_status_commits_when_configured_so(engine: Engine,
                                                  broker: BrokerLiteServer) -> None:
    app = make_app(engine, broker.native, ROCKETBOX_ROLLBACK_ON_ERROR_STATUS=False)
    with serve_wsgi(app) as address:
        assert http(address, "POST", "/orders", {"id": 7, "item": "x", "reject": True})[0] \
            == 422
    assert order_ids(engine) == {7}
    assert len(row_ids(engine)) == 1


@pytest.mark.timeout(60)
def test_several_publish_calls_in_one_view(engine: Engine, broker: BrokerLiteServer) -> None:
    app = make_app(engine, broker.native)
    with serve_wsgi(app) as address, Collector(broker.native, TOPIC, "flask-batch") as got:
        status, body = http(address, "POST", "/batch")
        assert status == 200 and len(body["tx_ids"]) == 3
        assert len(row_ids(engine)) == 4
        assert relay_all(state_for(app).outbox) == 4
        wait_until(lambda: sorted(got.keys()) == sorted(body["tx_ids"]), timeout=20,
                   message=lambda: f"consumed {got.keys()}")
        assert sorted(m.keys[0] for m in got.messages) == ["line-0", "line-1", "line-2"]
        assert {m.tags for m in got.messages} == {"Line"}
    assert sum(commit_counts(broker_records(broker.data_dir)).values()) == 4


@pytest.mark.timeout(60)
def test_half_first_mode_commits_on_success_and_rolls_back_on_error(
        engine: Engine, broker: BrokerLiteServer) -> None:
    app = make_app(engine, broker.native)
    try:
        with serve_wsgi(app) as address, Collector(broker.native, TOPIC, "flask-half") as got:
            assert http(address, "POST", "/half", {"id": 10})[0] == 200
            assert http(address, "POST", "/half", {"id": 11, "explode": True})[0] == 500
            [tx_id] = row_ids(engine)
            # no relay runs here: the decorator ended the half itself after the commit
            got.wait_for_keys([tx_id])
            with engine.connect() as conn:
                relayed = conn.execute(text("SELECT relayed_at FROM rocketbox_transaction"))
                assert relayed.scalar() is not None
    finally:
        state_for(app).close()
    assert order_ids(engine) == {10}
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx_id: 1}
    # the failing view never reached its commit, so it never sent a half
    assert mentioned(records) == {tx_id}


@pytest.mark.timeout(30)
def test_publish_outside_a_decorated_view_is_a_clear_error(engine: Engine) -> None:
    app = make_app(engine, "127.0.0.1:1")
    with app.test_client() as client:
        error = client.get("/outside").get_json()["error"]
    assert "must run inside an open database transaction" in error
    assert "no @transactional_message view" in error


@pytest.mark.timeout(30)
def test_autocommit_database_is_refused(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url, isolation_level="AUTOCOMMIT")
    orders_table(engine)
    app = make_app(engine, "127.0.0.1:1")
    app.config["PROPAGATE_EXCEPTIONS"] = True
    with app.test_client() as client, pytest.raises(Exception, match="AUTOCOMMIT"):
        client.post("/orders", json={"id": 1, "item": "x"})
    assert order_ids(engine) == set()
    engine.dispose()


@pytest.mark.timeout(30)
def test_init_app_twice_raises_and_config_defaults_are_set(engine: Engine) -> None:
    app = Flask(__name__)
    rocketbox = Rocketbox()
    rocketbox.init_app(app)
    assert app.config["ROCKETBOX_ROLLBACK_ON_ERROR_STATUS"] is True
    assert app.config["ROCKETBOX_MODE"] == "outbox"
    with pytest.raises(RuntimeError, match="already initialised"):
        rocketbox.init_app(app)
    assert "rocketbox" in app.cli.commands


@pytest.mark.timeout(60)
def test_cli_migrate_and_status(tmp_path: Any) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'cli.sqlite'}", "127.0.0.1:10911")
    runner = app.test_cli_runner()
    migrated = runner.invoke(args=["rocketbox", "migrate"])
    assert migrated.exit_code == 0, migrated.output
    assert "empty -> " in migrated.output
    status = runner.invoke(args=["rocketbox", "status", "--json"])
    assert status.exit_code == 0, status.output
    assert '"pending": 0' in status.output
    sql = runner.invoke(args=["rocketbox", "migrate", "--sql"])
    assert sql.exit_code == 0 and "CREATE TABLE rocketbox_transaction" in sql.output
    no_celery = runner.invoke(args=["rocketbox", "relay"])
    assert no_celery.exit_code != 0 and "needs a Celery broker" in no_celery.output


@pytest.mark.timeout(60)
def test_on_commit_enqueues_the_relay_task_only_after_a_commit(
        engine: Engine, broker: BrokerLiteServer, tmp_path: Any) -> None:
    queue = tmp_path / "celery.sqlite"
    # the task path (on PostgreSQL the default wakes the relays through NOTIFY instead)
    app = make_app(engine, broker.native, ROCKETBOX_CELERY_BROKER=f"sqla+sqlite:///{queue}",
                   ROCKETBOX_CELERY_SETTINGS=CelerySettings(listen=False))
    with serve_wsgi(app) as address:
        assert http(address, "POST", "/orders", {"id": 1, "item": "x", "reject": True})[0] \
            == 422
        assert http(address, "POST", "/orders", {"id": 2, "item": "x", "explode": True})[0] \
            == 500
        assert queued_relay_tasks(queue) == []
        assert http(address, "POST", "/orders", {"id": 3, "item": "tea"})[0] == 201
        assert queued_relay_tasks(queue) == [sorted(row_ids(engine))]
