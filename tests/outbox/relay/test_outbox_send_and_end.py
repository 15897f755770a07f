"""One round trip for a pass's halves and ends (``PipelinedTarget.send_and_end``) against a
real broker_lite: the same outcomes as the two steps, the end written before the halves'
answer, an end that found no half sent again by offset, and the relay's choice of path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

from broker_lite.client import Admin
from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings, publish
from outbox import relay as relay_module
from outbox.errors import RowFault, RowRefusedError
from outbox.targets import (
    HalfOutcome,
    HalfStored,
    LeftToCheckback,
    OutgoingMessage,
    TxEnded,
)
from outbox.targets.base import HalfThenEnd, TxState
from outbox.targets.broker_lite import BrokerLiteTarget
from tests.outbox.relay.outbox_relay_support import FAST_BROKER, fast_relay, relayed_ids
from tests.support import BrokerLiteServer, start_broker_lite
from tests.support.commitlog import broker_records, commit_counts
from tests.support.publishers import PassThrough


def _outbox(broker: str) -> Outbox:
    # the target never reads the database: an empty SQLite one stands in for the engine
    return Outbox(engine=create_engine("sqlite://"), broker=broker,
                  relay=RelaySettings(broker_timeout=5.0))


def _message(tx_id: str, topic: str, body: bytes = b"{}") -> OutgoingMessage:
    return OutgoingMessage(tx_id, topic, body, None, (), None, {})


def _watch(target: BrokerLiteTarget, events: list[str], monkeypatch: pytest.MonkeyPatch,
           *, halves_after_ends: bool = False) -> None:
    """Note when the producer's halves and ends requests start and finish; with
    ``halves_after_ends``, hold the halves back until the ends' answer is in (the
    order a broker serving requests out of order could give)."""
    producer = target._producer  # the test watches the client's own requests
    ends_done = asyncio.Event()

    def wrap(name: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def watched(*args: Any, **kwargs: Any) -> Any:
            events.append(f"{name} start")
            if name == "halves" and halves_after_ends:
                await asyncio.wait_for(ends_done.wait(), 10)
            try:
                return await call(*args, **kwargs)
            finally:
                events.append(f"{name} done")
                if name == "ends":
                    ends_done.set()
        return watched

    monkeypatch.setattr(producer, "send_halves", wrap("halves", producer.send_halves))
    monkeypatch.setattr(producer, "end_transactions", wrap("ends", producer.end_transactions))


def _send_and_end(publisher: BrokerLitePublisher, messages: Sequence[OutgoingMessage],
                  states: Sequence[TxState]) -> list[HalfThenEnd]:
    results = publisher.send_and_end(messages, states)
    assert results is not None
    return results


@pytest.mark.timeout(60)
def test_one_round_trip_gives_each_row_the_two_steps_outcomes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with start_broker_lite(tmp_path / "broker", [*FAST_BROKER, "--no-auto-create-topics",
                                                 "--max-message-size", "4K"]) as broker:
        with Admin(broker.native) as admin:
            admin.create_topic("Known")
        publisher = BrokerLitePublisher(_outbox(broker.native))
        events: list[str] = []
        try:
            publisher.send_halves([])  # nothing sent: only connects, so the next call may pipeline
            assert publisher.send_halves([_message("tx-warm", "Known")])  # connected now
            _watch(publisher.target, events, monkeypatch)  # type: ignore[arg-type]
            ok, typo, big, later = _send_and_end(publisher, [
                _message("tx-ok", "Known"), _message("tx-typo", "Knwon"),
                _message("tx-big", "Known", b"x" * 8192), _message("tx-later", "Known")],
                ["COMMIT", "COMMIT", "COMMIT", "UNKNOWN"])
            # the ends went out before the halves' answer came back: one round trip
            assert events.index("ends start") < events.index("halves done"), events
            again = _send_and_end(publisher, [_message("tx-ok", "Known")], ["COMMIT"])
        finally:
            publisher.close()
    commits = commit_counts(broker_records(broker.data_dir))
    half, ended = ok
    assert isinstance(half, HalfStored) and half.half_offset >= 0
    assert isinstance(ended, TxEnded) and ended.commit_offset > half.half_offset
    refused_half, no_end = typo
    assert isinstance(refused_half, RowRefusedError) and no_end is None
    assert refused_half.kind is RowFault.CONFIG and "Knwon" in str(refused_half)
    assert isinstance(big[0], RowRefusedError) and big[0].kind is RowFault.ROW_INVALID
    assert big[1] is None
    assert isinstance(later[0], HalfStored) and isinstance(later[1], LeftToCheckback)
    # sent again (a retried pass): the same half and the same commit, no second message
    [(half_again, ended_again)] = again
    assert isinstance(half_again, HalfStored) and half_again.half_offset == half.half_offset
    assert isinstance(ended_again, TxEnded)
    assert ended_again.commit_offset == ended.commit_offset
    assert commits["tx-ok"] == 1 and commits["tx-later"] == 0


@pytest.mark.timeout(60)
def test_an_end_that_found_no_half_is_sent_again_by_the_halfs_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with start_broker_lite(tmp_path / "broker", list(FAST_BROKER)) as broker:
        publisher = BrokerLitePublisher(_outbox(broker.native))
        events: list[str] = []
        try:
            assert publisher.send_halves([_message("tx-warm", "Orders")])  # connected now
            _watch(publisher.target, events, monkeypatch,  # type: ignore[arg-type]
                   halves_after_ends=True)
            results = _send_and_end(publisher, [_message("tx-1", "Orders"),
                                                _message("tx-2", "Orders")],
                                    ["COMMIT", "ROLLBACK"])
        finally:
            publisher.close()
    commits = commit_counts(broker_records(broker.data_dir))
    # the pipelined ends reached the broker first and found no half; the two-step ends
    # that followed (a second "ends start") named each half by its offset
    assert events.count("ends start") == 2, events
    assert events.index("ends done") < events.index("halves done")
    (half1, end1), (half2, end2) = results
    assert isinstance(half1, HalfStored) and isinstance(end1, TxEnded)
    assert end1.commit_offset > half1.half_offset
    assert isinstance(half2, HalfStored) and end2 == TxEnded("tx-2", -1)
    assert (commits["tx-1"], commits["tx-2"]) == (1, 0)


class _Counting(PassThrough):
    """Counts the calls of each way, and passes the one round trip on too."""

    def __init__(self, inner: BrokerLitePublisher) -> None:
        super().__init__(inner)
        self.inner_target = inner
        self.calls = {"send_and_end": 0, "send_halves": 0}

    def send_and_end(self, messages: Sequence[OutgoingMessage], states: Sequence[TxState]
                     ) -> list[HalfThenEnd] | None:
        self.calls["send_and_end"] += 1
        return self.inner_target.send_and_end(messages, states)

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        self.calls["send_halves"] += 1
        return super().send_halves(messages)


def _span_exporter() -> InMemorySpanExporter:
    """An in-memory exporter on the global tracer provider (set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.mark.timeout(90)
def test_the_relay_takes_one_round_trip_for_passes_of_ungrouped_rows_traced_or_not(
        pg_engine: Engine, broker: BrokerLiteServer, monkeypatch: pytest.MonkeyPatch) -> None:
    outbox = Outbox(engine=pg_engine, broker=broker.native, relay=fast_relay())
    publisher = _Counting(BrokerLitePublisher(outbox))
    relay = Relay(outbox, publisher)
    calls: list[dict[str, int]] = []
    published: list[str] = []

    def one_pass(traced: bool, group: str | None) -> int:
        # whether spans are exported is process-wide (another test may have installed a
        # tracer provider): each pass here says which it is
        monkeypatch.setattr(relay_module, "tracing_exported", lambda: traced)
        with contextlib.ExitStack() as request:
            if traced:  # each row carries the trace context of the request that wrote it
                request.enter_context(trace.get_tracer(__name__).start_as_current_span("req"))
            with Session(pg_engine) as session, session.begin():
                published.extend(publish(session, "Orders", {"n": n}, outbox=outbox,
                                         message_group=group) for n in range(3))
        before = dict(publisher.calls)
        relayed = relay.run_once().relayed
        calls.append({k: publisher.calls[k] - before[k] for k in before})
        return relayed

    try:
        relayed = [one_pass(False, None), one_pass(False, "cart-7")]
        exporter = _span_exporter()
        try:
            relayed.append(one_pass(True, None))
            finished = exporter.get_finished_spans()
        finally:
            exporter.shutdown()  # it keeps nothing of later tests' spans
    finally:
        publisher.close()
    assert relayed == [3, 3, 3]
    assert calls == [
        {"send_and_end": 1, "send_halves": 0},  # ungrouped: one round trip
        {"send_and_end": 0, "send_halves": 1},  # a message group ends in waves: two steps
        {"send_and_end": 1, "send_halves": 0},  # traced: one round trip as well
    ]
    # the traced pass's half and end spans both cover its one round trip, inside the pass
    spans = {s.name: s for s in finished}
    request = spans["req"]
    half, end, whole = (spans["rocketbox.relay half"], spans["rocketbox.relay end"],
                        spans["rocketbox.relay"])
    for span in (half, end):
        assert span.attributes is not None
        assert span.attributes.get("rocketbox.relay.one_round_trip") is True
        assert span.parent is not None and span.parent.span_id == whole.context.span_id
        # linked to the context the rows carry (the three share one request's span)
        assert [link.context.span_id for link in span.links] == [request.context.span_id]
        assert whole.start_time is not None and whole.end_time is not None
        assert span.start_time is not None and span.end_time is not None
        assert whole.start_time <= span.start_time <= span.end_time <= whole.end_time
    assert half.start_time == end.start_time
    assert set(published) <= relayed_ids(pg_engine)
    commits = commit_counts(broker_records(broker.data_dir))
    assert [commits[tx_id] for tx_id in published] == [1] * 9
