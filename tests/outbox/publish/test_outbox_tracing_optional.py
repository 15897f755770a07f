"""OpenTelemetry is optional: without it rocketbox publishes, relays and consumes as before;
with a span current, ``publish()`` stores its context in the row's headers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from sqlalchemy import create_engine, select

from outbox import Outbox, migrate, publish
from outbox.models import transaction_table as t
from outbox.tracing import TRACEPARENT, TRACESTATE, with_trace_context

WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # import opentelemetry now raises ImportError
from sqlalchemy import create_engine, select
from outbox import Outbox, publish, tracing
from outbox.models import transaction_table as t
from outbox.inbox import InboxConsumer
assert not tracing.enabled()
engine = create_engine(sys.argv[1])
with engine.begin() as conn:
    publish(conn, "Orders", {"n": 1}, outbox=Outbox(engine=engine), headers={"a": "b"})
with engine.connect() as conn:
    print(conn.execute(select(t.c.headers)).scalar_one())
"""


@pytest.mark.timeout(60)
def test_rocketbox_works_without_opentelemetry(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    migrate.upgrade(url)
    done = subprocess.run([sys.executable, "-c", WITHOUT_OTEL, url], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'a': 'b'}"


@pytest.mark.timeout(30)
def test_publish_stores_the_current_trace_context(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.sqlite'}")
    migrate.upgrade(engine)
    outbox = Outbox(engine=engine)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("request") as span, engine.begin() as conn:
        publish(conn, "Orders", {"n": 1}, outbox=outbox, headers={"a": "b"})
        publish(conn, "Orders", {"n": 2}, outbox=outbox,
                headers={TRACEPARENT: "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
        context = span.get_span_context()
    with engine.begin() as conn:  # no span: nothing stored
        publish(conn, "Orders", {"n": 3}, outbox=outbox)
    with engine.connect() as conn:
        first, given, untraced = conn.execute(select(t.c.headers).order_by(t.c.seq)).scalars()
    assert first == {"a": "b", TRACEPARENT:
                     f"00-{context.trace_id:032x}-{context.span_id:016x}-"
                     f"{context.trace_flags:02x}"}
    assert given == {TRACEPARENT: "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}  # kept as given
    assert untraced is None
    assert with_trace_context(None) is None and TRACESTATE not in first
    engine.dispose()


NO_PROVIDER = """
from outbox.tracing import record_relay_span, relay_span
headers = [{"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}] * 3
with relay_span("half", headers) as span:
    assert span is None, span  # no provider installed: no span, no links read
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
with relay_span("half", headers) as span:
    assert span is not None and span.is_recording()
    assert [link.context.trace_id for link in span.links] == [int("1" * 32, 16)]
record_relay_span("claim", headers, start_time=0)
print("ok")
"""


@pytest.mark.timeout(60)
def test_relay_spans_cost_nothing_until_a_tracer_provider_is_installed() -> None:
    done = subprocess.run([sys.executable, "-c", NO_PROVIDER], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[3])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
