"""A wave as one write (outbox/targets/rabbitmq_wave.py): the frames, and each row's own confirm.

The target encodes a row's frames itself and writes a wave at once, giving
each row its delivery tag and confirm future by hand; these tests hold that to
what aiormq's ``basic_publish`` does: the same bytes as pamqp writes, and a
row settled only by its own answer (ack, nack or return), never a neighbour's.
Real parts: a rabbitmq-server node, aio-pika.
"""

from __future__ import annotations

import asyncio

import aio_pika
import pamqp.frame
import pytest
from pamqp import commands as spec
from pamqp.body import ContentBody
from pamqp.header import ContentHeader

from outbox import Outbox
from outbox.errors import ConfigurationError, RowFault, RowRefusedError
from outbox.targets.base import HalfStored, OutgoingMessage
from outbox.targets.choose import publisher_for
from outbox.targets.rabbitmq import amqp_properties
from outbox.targets.rabbitmq_wave import RowTooLarge, check_channel, wave_frames
from outbox.targets.runner import TargetPublisher
from tests.support import wait_until
from tests.support.rabbitmq_server import RabbitMQServer
from tests.targets.rabbitmq.rabbit_support import queue_depth

ROWS = [
    OutgoingMessage("tx-a", "Orders", b'{"a": 1}', "created", ("k1", "k2"), "g1",
                    {"x": "y", "caf\u00e9": "cr\u00e8me"}),
    OutgoingMessage("tx-b", "Orders", b"x" * 300, None, (), None, {}),
    OutgoingMessage("tx-c", "Q", b"", "t", (), None,  # a row's header named like the target's
                    {"ROCKETBOX_TX_ID": "spoofed", "rocketbox-keys": "spoofed"}),
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("app_id", ["shop", ""])
@pytest.mark.parametrize("row", ROWS, ids=[r.tx_id for r in ROWS])
def test_a_rows_frames_are_byte_for_byte_what_pamqp_writes(row: OutgoingMessage,
                                                           app_id: str) -> None:
    published_ms = 1_700_000_000_123
    want = pamqp.frame.marshal(spec.Basic.Publish(exchange="ex", routing_key=row.topic,
                                                  mandatory=True), 7)
    properties = amqp_properties(row, app_id=app_id, published_ms=published_ms)
    want += pamqp.frame.marshal(ContentHeader(0, len(row.body), properties), 7)
    for start in range(0, len(row.body), 128):  # a body over the frame size is split
        want += pamqp.frame.marshal(ContentBody(row.body[start:start + 128]), 7)
    cache: dict[str, bytes] = {}
    for _ in range(2):  # the second from the cached Basic.Publish frame
        assert wave_frames(7, "ex", row, app_id=app_id, published_ms=published_ms,
                           max_content=128, publish_frames=cache) == want


@pytest.mark.timeout(30)
def test_a_channel_without_the_internals_a_wave_writes_through_fails_fast_naming_aiormq(
) -> None:
    """A wave writes through aiormq 7's channel internals; an aiormq without them (outside
    the extra's pin) is a setup error naming the package, not a failure of every row."""
    with pytest.raises(ConfigurationError, match=r"aiormq .*lacks .*confirmations") as caught:
        check_channel(object())
    assert caught.value.setting == "aiormq"
    assert "pip install 'rocketbox[rabbitmq]'" in str(caught.value)


@pytest.mark.timeout(30)
def test_a_field_over_the_short_string_limit_is_refused_by_name() -> None:
    row = OutgoingMessage("tx-d", "Orders", b"{}", "\u00e9" * 200, (), None, {})
    with pytest.raises(RowTooLarge, match="tag is 400 bytes encoded") as caught:
        wave_frames(1, "", row, app_id="shop", published_ms=1, max_content=1000,
                    publish_frames={})
    assert caught.value.field == "tag"


async def _declare_bounded(url: str, name: str, length: int) -> None:
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel()
        # classic: a quorum queue applies its length limit late, so a quick wave all gets in
        await channel.declare_queue(name, durable=True, arguments={
            "x-queue-type": "classic", "x-max-length": length, "x-overflow": "reject-publish"})


@pytest.mark.timeout(120)
def test_in_one_wave_each_row_takes_its_own_ack_nack_or_return(
        outbox: Outbox, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    """One wave: rows to a queue that nacks past 5 messages, rows no queue takes, a row
    AMQP cannot carry, and rows to a queue that takes all; every row gets its own answer."""
    bounded = queue + "-bounded"
    asyncio.run(_declare_bounded(rabbitmq_server.url, bounded, 5))
    publisher = publisher_for(outbox)
    assert isinstance(publisher, TargetPublisher)
    wave, expect = [], {}
    for i in range(60):
        kind = ("bounded", "open", "nowhere", "open")[i % 4] if i != 31 else "too-long"
        topic = {"bounded": bounded, "nowhere": queue + "-missing"}.get(kind, queue)
        tag = "\u00e9" * 200 if kind == "too-long" else None
        wave.append(OutgoingMessage(f"w-{i}", topic, b'{"i": %d}' % i, tag, (), None, {}))
        expect[f"w-{i}"] = kind
    bounded_ids = [tx for tx, kind in expect.items() if kind == "bounded"]
    try:
        answers = publisher.send_halves(wave)
    finally:
        publisher.close()
    assert [a.tx_id for a in answers] == [m.tx_id for m in wave]
    by_id = {a.tx_id: a for a in answers}
    stored = {tx for tx, a in by_id.items() if isinstance(a, HalfStored)}
    # the queue that takes all: each of its rows confirmed
    assert {tx for tx, kind in expect.items() if kind == "open"} <= stored
    # the bounded queue: its first five in, every later one nacked, each on its own
    assert [tx for tx in bounded_ids if tx in stored] == bounded_ids[:5]
    for tx in bounded_ids[5:]:
        refusal = by_id[tx]
        assert isinstance(refusal, RowRefusedError) and refusal.kind is RowFault.TRANSIENT
        assert "nacked" in str(refusal)
    for tx, kind in expect.items():
        refusal = by_id[tx]
        if kind == "nowhere":
            assert isinstance(refusal, RowRefusedError) and refusal.kind is RowFault.CONFIG
            assert "no queue takes routing key" in str(refusal)
        elif kind == "too-long":
            assert isinstance(refusal, RowRefusedError)
            assert refusal.kind is RowFault.ROW_INVALID and "tag is 400 bytes" in str(refusal)
    assert len(stored) == 5 + sum(kind == "open" for kind in expect.values())
    wait_until(lambda: queue_depth(rabbitmq_server.url, queue) == 29, timeout=30,
               message=lambda: f"queue holds {queue_depth(rabbitmq_server.url, queue)}")
    assert queue_depth(rabbitmq_server.url, bounded) == 5
