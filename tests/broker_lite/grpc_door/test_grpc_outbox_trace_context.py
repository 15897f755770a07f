"""A relayed outbox row's ``traceparent`` reaches a consumer of the gRPC door (the official
RocketMQ client) as a user property, as it reaches the native client's."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from sqlalchemy import create_engine

from outbox import BrokerLitePublisher, Outbox, Relay, migrate, publish
from outbox.tracing import TRACEPARENT
from tests.broker_lite.grpc_door.grpc_support import receive, running, simple_consumer
from tests.support import BrokerLiteServer

pytestmark = pytest.mark.grpc


@pytest.mark.timeout(60)
def test_trace_context_is_a_user_property_through_the_grpc_door(
        grpc_broker: BrokerLiteServer, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.sqlite'}")
    migrate.upgrade(engine)
    outbox = Outbox(engine=engine, broker=grpc_broker.native)
    tracer = TracerProvider().get_tracer("test")  # a recording span, no global provider
    with running(simple_consumer(grpc_broker.grpc, "traced", "Traced")) as consumer:
        with tracer.start_as_current_span("request") as span, engine.begin() as conn:
            publish(conn, "Traced", {"n": 1}, outbox=outbox,
                    headers={"colour": "blue"})
            context = span.get_span_context()
        publisher = BrokerLitePublisher(outbox)
        try:
            assert Relay(outbox, publisher).run_once().relayed == 1
        finally:
            publisher.close()
        [message] = receive(consumer, 1)
    properties = dict(message.properties)
    assert properties[TRACEPARENT] == \
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert properties["colour"] == "blue"
    engine.dispose()
