"""A target that names where the broker put a row: the relay writes it to ``broker_position``.

The seam (docs/targets.md, "Writing a target"): a target hands back a position
string on :class:`TxEnded` (or, when it stores the message while sending, on
:class:`HalfStored`); the relay, and ``half_first``'s :func:`end_then_mark`,
write it to the row when they mark it relayed. broker_lite says no position, so
its rows keep NULL. The rows go to a real broker_lite; a pass-through publisher
at the seam adds the positions a NATS or RabbitMQ target would (``LOG:<offset>``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, RelaySettings, publish
from outbox.ending import end_then_mark
from outbox.models import transaction_table as t
from outbox.targets import EndOutcome, HalfOutcome, HalfStored, OutgoingMessage, TxEnd, TxEnded
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite
from tests.support.outbox_db import pg_outbox_database
from tests.support.publishers import PassThrough, drain
from tests.support.sqlite import sqlite_outbox_engine

FAST = RelaySettings(batch_size=10, lease_seconds=5, max_attempts=3, backoff_base=0.01,
                     backoff_max=0.05, jitter=0.0, broker_timeout=2.0)


class Positions(PassThrough):
    """Names a position on every half (``HALF:<tx_id>``) and on the end of the rows in
    ``on_end`` (``LOG:<commit offset>``), as a target without halves would."""

    def __init__(self, inner: BrokerLitePublisher, on_end: set[str]) -> None:
        super().__init__(inner)
        self.on_end = on_end

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        return [msgspec.structs.replace(h, position=f"HALF:{h.tx_id}")
                if isinstance(h, HalfStored) else h
                for h in self.inner.send_halves(messages)]

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        return [msgspec.structs.replace(e, position=f"LOG:{e.commit_offset}")
                if isinstance(e, TxEnded) and e.tx_id in self.on_end else e
                for e in self.inner.end_transactions(ends)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", ("--tx-timeout", "1")) as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = sqlite_outbox_engine(tmp_path / "outbox.sqlite")
        yield engine
        engine.dispose()
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    with pg_outbox_database(server, "pos") as (engine, _url):
        yield engine


def _rows(engine: Engine) -> dict[str, tuple[int | None, str | None]]:
    with engine.connect() as conn:
        return {r.tx_id: (r.commit_offset, r.broker_position) for r in conn.execute(
            select(t.c.tx_id, t.c.commit_offset, t.c.broker_position)
            .where(t.c.relayed_at.is_not(None)))}


def _publish(engine: Engine, outbox: Outbox, count: int) -> list[str]:
    with Session(engine) as session, session.begin():
        return [publish(session, "Pos", {"n": n}, outbox=outbox) for n in range(count)]


@pytest.mark.timeout(120)
def test_the_relay_writes_the_position_a_target_names(engine: Engine,
                                                      broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=engine, broker=broker.native, relay=FAST)
    first, *others = _publish(engine, outbox, 3)
    report = drain(outbox, Positions(BrokerLitePublisher(outbox), on_end={first}))
    assert report.relayed == 3
    rows = _rows(engine)
    assert set(rows) == {first, *others}
    offset, position = rows[first]
    assert offset is not None and offset >= 0
    assert position == f"LOG:{offset}"  # the end's position wins over the half's
    for tx_id in others:
        assert rows[tx_id][1] == f"HALF:{tx_id}"  # no position on the end: the half's


@pytest.mark.timeout(120)
def test_broker_lite_names_no_position_and_the_column_stays_null(
        engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=engine, broker=broker.native, relay=FAST)
    ids = _publish(engine, outbox, 2)
    assert drain(outbox).relayed == 2
    rows = _rows(engine)
    assert set(rows) == set(ids)
    assert all(offset is not None and offset >= 0 and position is None
               for offset, position in rows.values())


@pytest.mark.timeout(120)
def test_half_first_ends_mark_the_position_too(tmp_path: Path,
                                               broker: BrokerLiteServer) -> None:
    """``end_then_mark`` (the half_first flows and the Celery end task) writes it as well."""
    engine = sqlite_outbox_engine(tmp_path / "outbox.sqlite")
    try:
        outbox = Outbox(engine=engine, broker=broker.native, relay=FAST)
        named, plain = _publish(engine, outbox, 2)
        publisher = Positions(BrokerLitePublisher(outbox), on_end={named})
        try:
            with engine.connect() as conn:
                rows = conn.execute(select(t.c.tx_id, t.c.topic, t.c.body)).all()
            halves = publisher.send_halves([OutgoingMessage(r.tx_id, r.topic, r.body, None, (),
                                                            None, {}) for r in rows])
            ends = [TxEnd(h, "COMMIT") for h in halves if isinstance(h, HalfStored)]
            assert len(ends) == 2
            outcomes = end_then_mark(outbox, ends, publisher.end_transactions)
        finally:
            publisher.close()
        assert isinstance(outcomes, list) and all(isinstance(o, TxEnded) for o in outcomes)
        marked = _rows(engine)
        assert marked[named] == (marked[named][0], f"LOG:{marked[named][0]}")
        assert marked[plain][1] == f"HALF:{plain}"
    finally:
        engine.dispose()
