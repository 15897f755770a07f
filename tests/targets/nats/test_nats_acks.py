"""The NATS target's acks (outbox/targets/nats_acks.py) against a real nats-server.

A batch is published at once and its acks come back on one reply
subscription: each row must be marked with the answer to its own publish
(its stream sequence holds its own ``tx_id``), and a row whose answer is a
refusal ("no responders": its stream was deleted after it was checked) is
refused alone, naming its subject, while the rest of the batch is relayed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import Outbox, Relay
from outbox.models import transaction_table as t
from outbox.publish import publish
from outbox.targets.choose import publisher_for
from tests.support import PostgresServer
from tests.support.nats_server import NatsServer
from tests.support.outbox_db import pg_outbox_database
from tests.targets.nats.nats_support import (
    committed,
    create_stream,
    fast_relay,
    relayed,
    row_errors,
    run,
    stored,
)

RELAY = fast_relay(batch_size=200)


@pytest.fixture
def engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    with pg_outbox_database(postgres_server, "nats_acks", pool_size=5) as (engine, _url):
        yield engine


def _positions(engine: Engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(select(t.c.tx_id, t.c.broker_position)).all())


@pytest.mark.timeout(120)
def test_each_row_is_marked_with_its_own_ack_and_a_vanished_stream_refuses_only_its_rows(
        engine: Engine, nats_server: NatsServer) -> None:
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=RELAY)
    create_stream(nats_server.url, "KEPT", ["Kept"], RELAY)
    create_stream(nats_server.url, "GONE", ["Gone"], RELAY)
    publisher = publisher_for(outbox)
    try:
        # the first pass checks both streams (the target remembers them)
        first = committed(outbox, "Kept", 3) + committed(outbox, "Gone", 1)
        assert Relay(outbox, publisher).run_once().relayed == 4

        async def delete(js: object) -> None:
            await js.delete_stream("GONE")  # type: ignore[attr-defined]

        run(nats_server.url, delete)
        kept: list[str] = []
        gone: list[str] = []
        with Session(engine) as session, session.begin():  # one batch, topics interleaved
            for i in range(120):
                topic = "Gone" if i % 20 == 7 else "Kept"
                (gone if topic == "Gone" else kept).append(
                    publish(session, topic, {"i": i}, outbox=outbox))
        report = Relay(outbox, publisher).run_once()
    finally:
        publisher.close()
    assert report.claimed == 120 and report.relayed == len(kept) == 114
    assert report.failed == len(gone) == 6
    errors = row_errors(engine)
    for tx_id in gone:
        assert "no JetStream stream takes subject 'Gone'" in str(errors[tx_id])
    assert relayed(engine) == set(first) | set(kept)
    # every relayed row's position is the stream message that carries its own tx_id
    by_seq = {m.seq: m.tx_id for m in stored(nats_server.url, "KEPT")}
    positions = _positions(engine)
    for tx_id in [*first[:3], *kept]:
        stream, _, seq = str(positions[tx_id]).partition(":")
        assert stream == "KEPT" and by_seq[int(seq)] == tx_id, (tx_id, positions[tx_id])
    assert sorted(by_seq.values()) == sorted([*first[:3], *kept])
