"""The FastAPI integration through uvicorn and real HTTP, on aiosqlite, asyncpg and psycopg
async: commit, raise, 4xx, several messages, concurrent requests on one debug-mode loop.
"""

from __future__ import annotations

import dataclasses
import pickle
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text
from sqlalchemy.ext.asyncio import AsyncSession

from integrations._assembly import Assembly
from integrations.fastapi import Rocketbox, publish
from outbox import ConfigurationError, NoTransactionError
from tests.integrations.integrations_support import FAST_BROKER, Collector, http, relay_all, row_ids
from tests.support import BrokerLiteServer, start_broker_lite, wait_until
from tests.support.asgi import async_database, serve_asgi

TOPIC = "FastOrders"
#: the tests that never relay need no broker
NO_BROKER = "127.0.0.1:9"
DRIVERS = ["aiosqlite", pytest.param("asyncpg", marks=pytest.mark.postgres),
           pytest.param("psycopg_async", marks=pytest.mark.postgres)]


def make_app(rocketbox: Rocketbox, *, big_body: int = 0, topic: str = TOPIC) -> FastAPI:
    app = FastAPI(lifespan=rocketbox.lifespan)

    def body(rv: dict[str, Any]) -> dict[str, Any]:
        if big_body:  # serializing this holds the loop in rocketbox's code: the detector's test
            return {**rv, "big": list(range(big_body))}
        return rv

    @app.post("/orders", status_code=201)
    @rocketbox.transactional_message(topic=topic, tag="OrderCreated", body=body,
                                     keys=lambda rv: str(rv["id"]))
    async def create_order(request: Request,
                           session: AsyncSession = Depends(rocketbox.session),  # noqa: B008
                           ) -> Any:
        payload = await request.json()
        await session.execute(text("INSERT INTO orders (id, item) VALUES (:i, :n)"),
                              {"i": payload["id"], "n": payload["item"]})
        if payload.get("explode"):
            raise RuntimeError("boom")
        if payload.get("conflict"):
            raise HTTPException(409, "conflict")
        if payload.get("reject"):
            return JSONResponse({"error": "rejected"}, status_code=422)
        return {"id": payload["id"], "item": payload["item"]}

    @app.post("/batch")
    @rocketbox.transactional_message(topic=topic, tag="Line")
    async def batch(response: Response) -> dict[str, Any]:
        ids = [await publish(None, {"line": i}, keys=f"line-{i}") for i in range(3)]
        ids.append(await publish("FastAudit", {"lines": 3}, tag="Audit"))
        if len(ids) != 4:
            response.status_code = 500
        return {"tx_ids": ids}

    @app.post("/teapot")
    @rocketbox.transactional_message(topic=TOPIC)
    async def teapot(response: Response) -> dict[str, Any]:
        await publish(None, {"tea": True})
        response.status_code = 418  # set on the injected response: rolls back too
        return {}

    @app.get("/outside")
    async def outside() -> dict[str, str]:
        try:
            await publish(TOPIC, {"x": 1})
        except NoTransactionError as exc:
            return {"error": str(exc)}
        return {"error": ""}

    return app


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerLiteServer]:
    """One broker for the module: each test sends to a topic of its own."""
    with start_broker_lite(tmp_path_factory.mktemp("broker"), FAST_BROKER) as server:
        yield server


@pytest.fixture
def topic() -> str:
    return f"FastOrders{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=DRIVERS)
def rocketbox(request: pytest.FixtureRequest, tmp_path: Path,
              shared_broker: BrokerLiteServer) -> Iterator[Rocketbox]:
    postgres = (request.getfixturevalue("postgres_server")
                if request.param != "aiosqlite" else None)
    _sync, async_url = async_database(request.param, tmp_path, postgres)
    options = {"connect_args": {"timeout": 30}} if request.param == "aiosqlite" else {}
    box = Rocketbox(async_url, broker=shared_broker.native, celery_broker="",
                    engine_options=options)
    yield box
    box.base_outbox.engine.dispose()


def order_ids(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT id FROM orders")).scalars())


@pytest.mark.timeout(90)
def test_commit_sends_one_message_and_failures_none(
        rocketbox: Rocketbox, shared_broker: BrokerLiteServer, topic: str) -> None:
    engine = rocketbox.base_outbox.engine
    with serve_asgi(make_app(rocketbox, topic=topic)) as server, \
            Collector(shared_broker.native, topic, "fastapi-it") as got:
        address = server.address
        assert http(address, "POST", "/orders", {"id": 1, "item": "tea"}) == \
            (201, {"id": 1, "item": "tea"})
        assert http(address, "POST", "/orders", {"id": 2, "item": "x", "explode": True})[0] \
            == 500
        assert http(address, "POST", "/orders", {"id": 3, "item": "x", "conflict": True})[0] \
            == 409
        assert http(address, "POST", "/orders", {"id": 4, "item": "x", "reject": True})[0] \
            == 422
        assert http(address, "POST", "/teapot")[0] == 418
        status, outside = http(address, "GET", "/outside")
        assert status == 200 and "no @transactional_message view" in outside["error"]
        assert order_ids(engine) == {1}
        [tx_id] = row_ids(engine)
        assert relay_all(rocketbox.base_outbox) == 1
        got.wait_for_keys([tx_id])
        [message] = got.messages
        assert message.tags == "OrderCreated" and message.keys == ("1",)
        assert message.body == b'{"id":1,"item":"tea"}'
        assert server.rocketbox_stalls() == [], server.report()


@pytest.mark.timeout(90)
def test_several_messages_in_one_request_and_concurrent_requests(
        rocketbox: Rocketbox, shared_broker: BrokerLiteServer, topic: str) -> None:
    engine = rocketbox.base_outbox.engine
    with serve_asgi(make_app(rocketbox, topic=topic)) as server, \
            Collector(shared_broker.native, topic, "fastapi-many") as got:
        status, body = http(server.address, "POST", "/batch")
        assert status == 200 and len(body["tx_ids"]) == 4
        assert row_ids(engine) == set(body["tx_ids"])
        # 24 requests, 8 at a time, on the server's one event loop
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda i: http(server.address, "POST", "/orders",
                                                   {"id": 100 + i, "item": "tea"}),
                                    range(24)))
        assert [status for status, _ in results] == [201] * 24
        assert order_ids(engine) == set(range(100, 124))
        assert len(row_ids(engine)) == 28
        assert relay_all(rocketbox.base_outbox) == 28
        # every row on this topic: the batch's three lines and the 24 orders (its fourth
        # message went to FastAudit); all of them, not just as many
        expected = row_ids(engine) - set(body["tx_ids"][3:])
        assert len(expected) == 27
        wait_until(lambda: set(got.keys()) >= expected, timeout=60,
                   message=lambda: f"consumed {len(set(got.keys()))} of {len(expected)}")
        assert set(got.keys()) == expected
        assert server.rocketbox_stalls() == [], server.report()


@pytest.mark.timeout(60)
def test_the_slow_callback_detector_sees_a_blocking_call_in_rocketbox(tmp_path: Path) -> None:
    """The check above can fail: a body that takes long to serialize holds the loop in
    rocketbox's ``to_body`` (the serializer is the standard library's pure-Python
    pickler, so the stall is rocketbox's, and the watchdog can sample it)."""
    _sync, async_url = async_database("aiosqlite", tmp_path)
    pickler = SimpleNamespace(content_type="application/x-python-pickle",
                              dumps=pickle._dumps)  # type: ignore[attr-defined]
    box = Rocketbox(async_url, broker=NO_BROKER, celery_broker="", serializer=pickler)
    try:
        with serve_asgi(make_app(box, big_body=300_000)) as server:
            assert http(server.address, "POST", "/orders", {"id": 1, "item": "tea"})[0] == 201
            wait_until(server.rocketbox_stalls, timeout=10, message=server.report)
            assert any(culprit.startswith("outbox/serializers.py")
                       for stall in server.rocketbox_stalls()
                       for culprit, _stack in stall.samples), server.report()
            wait_until(lambda: server.slow, timeout=10,
                       message="no slow-callback warning from asyncio itself")
    finally:
        box.base_outbox.engine.dispose()


@pytest.mark.timeout(60)
def test_the_relay_task_is_enqueued_off_the_loop(tmp_path: Path) -> None:
    """``on_commit`` (the Celery enqueue) runs in an executor thread, after the commit."""
    _sync, async_url = async_database("aiosqlite", tmp_path)
    box = Rocketbox(async_url, broker=NO_BROKER, celery_broker="")
    seen: list[tuple[list[str], str]] = []

    def hook(ids: Sequence[str]) -> None:  # where Celery's (blocking) enqueue would run
        seen.append((list(ids), threading.current_thread().name))

    # the outbox the views publish to, as _build() makes it, with this hook for Celery's
    box._built = Assembly(outbox=dataclasses.replace(box.base_outbox, on_commit=hook),
                          base_outbox=box.base_outbox, celery=None, celery_broker=None)
    try:
        with serve_asgi(make_app(box)) as server:
            assert http(server.address, "POST", "/orders", {"id": 5, "item": "tea"})[0] == 201
            [(ids, thread)] = seen
            assert ids == list(row_ids(box.base_outbox.engine)) and thread != "uvicorn"
            assert server.rocketbox_stalls() == [], server.report()
    finally:
        box.base_outbox.engine.dispose()


def test_sync_drivers_and_sync_views_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="needs an async driver"):
        Rocketbox(f"sqlite:///{tmp_path / 'x.sqlite'}")
    box = Rocketbox(f"sqlite+aiosqlite:///{tmp_path / 'x.sqlite'}", celery_broker="")
    with pytest.raises(ConfigurationError, match="decorates an async def view"):
        box.transactional_message(topic=TOPIC)(lambda: None)
