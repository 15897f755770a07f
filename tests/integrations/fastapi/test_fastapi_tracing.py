"""One request followed through FastAPI -> publish -> relay -> broker -> inbox consumer, with
the OpenTelemetry SDK's in-memory exporter: one trace, parents and links where they belong.

``ROCKETBOX_TRACE_SVG=path`` also draws the finished spans there (docs/tracing.svg is one
such run, drawn by :mod:`support.trace_svg`).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text
from sqlalchemy.orm import Session

from broker_lite.client import ReceivedMessage
from integrations.fastapi import Rocketbox
from outbox import BrokerLitePublisher, InboxConsumer, Relay
from outbox.models import transaction_table as t
from outbox.tracing import TRACEPARENT
from tests.integrations.integrations_support import FAST_BROKER, http
from tests.support import start_broker_lite, wait_until
from tests.support.asgi import async_database, serve_asgi
from tests.support.trace_svg import render


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the global tracer provider (set once per process)."""
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def make_app(rocketbox: Rocketbox, topic: str) -> FastAPI:
    app = FastAPI(lifespan=rocketbox.lifespan)
    @app.post("/orders", status_code=201)
    @rocketbox.transactional_message(topic=topic, tag="OrderCreated", body=lambda rv: rv)
    async def create_order(request: Request) -> dict[str, Any]:
        return {"ref": (await request.json())["ref"]}

    return app


@pytest.mark.timeout(90)
def test_one_request_is_one_trace_from_the_view_to_the_consumer(
        spans: InMemorySpanExporter, tmp_path: Path) -> None:
    topic = f"TracedOrders{uuid.uuid4().hex[:6]}"
    _sync, async_url = async_database("aiosqlite", tmp_path)
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as broker:
        box = Rocketbox(async_url, broker=broker.native, celery_broker="",
                        engine_options={"connect_args": {"timeout": 30}})
        engine = box.base_outbox.engine
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE shipments (ref TEXT PRIMARY KEY)"))

        def ship(session: Session, message: ReceivedMessage) -> None:
            with trace.get_tracer("warehouse").start_as_current_span("ship"):
                session.execute(text("INSERT INTO shipments (ref) VALUES (:r)"),
                                {"r": json.loads(message.body)["ref"]})

        received: list[ReceivedMessage] = []
        consumer = InboxConsumer(topic, "warehouse",
                                 lambda s, m: (received.append(m), ship(s, m)),
                                 engine=engine, server=broker.native, rebalance_interval=0.5)
        spans.clear()
        with serve_asgi(make_app(box, topic)) as server, consumer:
            assert http(server.address, "POST", "/orders", {"ref": "r-1"})[0] == 201
            with engine.connect() as conn:
                [headers] = conn.execute(text(f"SELECT headers FROM {t.name}")).scalars()
            publisher = BrokerLitePublisher(box.base_outbox)
            try:
                assert Relay(box.base_outbox, publisher).run_once().relayed == 1
            finally:
                publisher.close()
            wait_until(lambda: consumer.processed == 1, timeout=30)
        engine.dispose()
    finished = list(spans.get_finished_spans())
    if os.environ.get("ROCKETBOX_TRACE_SVG"):
        Path(os.environ["ROCKETBOX_TRACE_SVG"]).write_text(render(finished), encoding="utf-8")
    by_name = {s.name: s for s in finished}
    # FastAPI's own server span (its native OpenTelemetry support) and the endpoint's
    request, endpoint = by_name["POST /orders"], by_name["fastapi.endpoint"]
    trace_id = request.context.trace_id
    assert request.parent is None and request.kind == trace.SpanKind.SERVER
    assert endpoint.parent is not None and endpoint.parent.span_id == request.context.span_id
    # the row and the message carry the context publish() ran in: the endpoint's span
    stored = json.loads(headers) if isinstance(headers, str) else headers
    _version, stored_trace, stored_span, _flags = stored[TRACEPARENT].split("-")
    assert (int(stored_trace, 16), int(stored_span, 16)) == \
        (trace_id, endpoint.context.span_id)
    assert received[0].properties[TRACEPARENT] == stored[TRACEPARENT]
    # the consumer continues the trace: a child of that span, and its handler's span a
    # child of the consumer's
    process, ship_span = by_name["rocketbox.inbox process"], by_name["ship"]
    assert process.context.trace_id == trace_id and process.parent is not None
    assert process.parent.span_id == endpoint.context.span_id
    assert process.kind == trace.SpanKind.CONSUMER
    assert ship_span.parent is not None and ship_span.parent.span_id == process.context.span_id
    # the relay's pass is a trace of its own (it may carry many requests' rows); each of
    # its spans links to the row's context
    relay = by_name["rocketbox.relay"]
    assert relay.parent is None and relay.context.trace_id != trace_id
    for name in ("rocketbox.relay claim", "rocketbox.relay half", "rocketbox.relay end"):
        span = by_name[name]
        assert span.parent is not None and span.parent.span_id == relay.context.span_id
        assert span.context.trace_id == relay.context.trace_id
    for span in (relay, *(by_name[f"rocketbox.relay {n}"] for n in ("claim", "half", "end"))):
        assert [(link.context.trace_id, link.context.span_id) for link in span.links] == \
            [(trace_id, endpoint.context.span_id)], span.name
    # and nothing else: every span is in the request's trace or the relay pass's
    assert {s.context.trace_id for s in finished} == {trace_id, relay.context.trace_id}
