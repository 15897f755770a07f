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


@pytest.mark.timeout(60)
def test_plain_acks_reach_their_slots_as_bytes_and_a_reply_with_headers_as_nats_py_reads_it(
        nats_server: NatsServer) -> None:
    """The target's connection hands a reply without headers on the inbox straight to its
    slot (no ``Msg``, no subscription task); one with headers, or another subscription's
    message, goes nats-py's way; a late reply or a subject of the inbox that is no slot of
    a batch is dropped."""
    import asyncio

    import nats
    from nats.aio.msg import Msg

    from outbox.targets.nats_acks import AckInbox, AckReadingClient

    async def go() -> None:
        client = AckReadingClient()
        await client.connect(nats_server.url, connect_timeout=5)
        other = await nats.connect(nats_server.url, connect_timeout=5)
        try:
            inbox = AckInbox()
            await inbox.start(client)
            assert client.ack_inbox is inbox
            seen: list[Msg] = []

            async def elsewhere(msg: Msg) -> None:
                seen.append(msg)

            await client.subscribe("Elsewhere", cb=elsewhere)
            await client.flush()
            late_number, late_prefix, _ = inbox.open(1)
            inbox.close(late_number)
            number, prefix, slots = inbox.open(3)
            await other.publish(late_prefix.decode() + "0", b"late")
            await other.publish(prefix.decode() + "9", b"no such slot")
            await other.publish(prefix.decode() + "0", b'{"stream":"S","seq":1}')
            await other.publish(prefix.decode() + "2", b"", headers={"Status": "503"})
            await other.publish(prefix.decode() + "1", b'{"stream":"S","seq":2}')
            await other.publish("Elsewhere", b"not an ack")
            await other.flush()
            await asyncio.wait_for(slots.done, 10)
            inbox.close(number)
            first, second, third = slots.slots
            assert first == b'{"stream":"S","seq":1}' and second == b'{"stream":"S","seq":2}'
            assert isinstance(third, Msg) and third.headers == {"Status": "503"}
            assert AckInbox.acked(first) == AckInbox.outcome(first)
            assert AckInbox.acked(third) is None
            assert type(AckInbox.outcome(third)).__name__ == "NoStreamResponseError"
            # the other subscription's callback runs from its own task: wait for it
            deadline = asyncio.get_running_loop().time() + 10
            while not seen and asyncio.get_running_loop().time() < deadline:
                await client.flush()
            assert [m.data for m in seen] == [b"not an ack"]
        finally:
            await other.close()
            await client.close()

    asyncio.run(go())
