"""The NATS target's batch writes (outbox/targets/nats_wire.py) against a real nats-server.

The target writes a batch's ``HPUB`` commands itself instead of calling
nats-py's ``publish`` once per row, so:

* the bytes must be what nats-py's ``publish`` writes for the same headers;
* each row refused before it is sent (a header nats-py cannot send, a
  ``tx_id`` that is no header value, a message over the server's
  ``max_payload``) is refused alone, ``row_invalid``, naming its field, and
  the rest of the batch is published, each row with the ack of its own
  publish;
* a nats-py without the internals a batch is written through fails at once,
  naming the package.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import nats
import pytest
from sqlalchemy import create_engine

from outbox import Outbox
from outbox.errors import ConfigurationError, RowFault, RowRefusedError
from outbox.targets.base import HalfStored, OutgoingMessage
from outbox.targets.nats import EXPECTED_STREAM_HEADER, NatsTarget, headers_for
from outbox.targets.nats_stream import subject_for
from outbox.targets.nats_wire import check_client, hpub, row_head, topic_wire
from outbox.targets.runner import TargetPublisher
from tests.support.nats_server import NatsServer
from tests.targets.nats.nats_support import create_stream, fast_relay, stored

RELAY = fast_relay()


def _msg(tx_id: str, topic: str = "Wire", *, body: bytes = b'{"n":1}', tag: str | None = None,
         keys: tuple[str, ...] = (), group: str | None = None,
         properties: dict[str, str] | None = None) -> OutgoingMessage:
    return OutgoingMessage(tx_id=tx_id, topic=topic, body=body, tag=tag, keys=keys,
                           message_group=group, properties=properties or {})


@pytest.fixture
def publisher(nats_server: NatsServer) -> Iterator[TargetPublisher]:
    outbox = Outbox(engine=create_engine("sqlite://"), broker=nats_server.url, relay=RELAY)
    publisher = TargetPublisher(NatsTarget(outbox))
    try:
        yield publisher
    finally:
        publisher.close()


@pytest.mark.timeout(60)
def test_a_batch_is_written_byte_for_byte_as_nats_py_publishes_each_row(
        nats_server: NatsServer) -> None:
    cases = [
        (_msg("T1"), "WIRE"),
        (_msg("T2", tag="created", keys=("k1", "k2"), group="cust.42",
              properties={"traceparent": "00-ab-cd-01", "X-Padded": "  two words  ",
                          "x-utf8": "héllo"}), "WIRE"),
        (_msg("T3", tag="line\nbreak", properties={"a": "1"}), None),  # no stream checked
    ]

    async def compare() -> None:
        client = await nats.connect(nats_server.url, connect_timeout=5)
        try:
            for msg, stream in cases:
                headers = headers_for(msg)
                assert isinstance(headers, dict)
                if stream is not None:
                    headers[EXPECTED_STREAM_HEADER] = stream
                subject = subject_for(msg.topic, msg.message_group)
                # nats-py puts the command on its pending buffer; its flusher runs only once
                # this coroutine yields, which it does not before the buffer is read
                await client.publish(subject, msg.body, reply="_INBOX.x.0.7", headers=headers)
                theirs = client._pending[-1]
                head = row_head(msg, topic_wire(msg.topic, stream).tail)
                assert isinstance(head, bytes)
                assert hpub(subject.encode(), b"_INBOX.x.0.7", head, msg.body) == theirs
        finally:
            await client.close()

    asyncio.run(compare())


@pytest.mark.timeout(120)
def test_rows_refused_before_sending_are_refused_alone_naming_their_field(
        nats_server: NatsServer, publisher: TargetPublisher) -> None:
    create_stream(nats_server.url, "WIRE2", ["Wire2"], RELAY)
    limit = 1024 * 1024  # nats-server's default max_payload
    bad = {
        "bad-header": (_msg("bad-header", "Wire2", properties={"x(y)": "1"}), "'x(y)'"),
        "bad-size": (_msg("bad-size", "Wire2", body=b"x" * (limit - 20)), "max_payload"),
        "bad\nid": (_msg("bad\nid", "Wire2"), "tx_id"),
    }
    good = [_msg(f"good-{i}", "Wire2", properties={"trace": str(i)}) for i in range(9)]
    # one batch, the refused rows among the good ones
    batch = [*good[:3], bad["bad-header"][0], *good[3:6], bad["bad-size"][0], *good[6:8],
             bad["bad\nid"][0], good[8]]
    outcomes = publisher.send_halves(batch)
    assert len(outcomes) == len(batch)
    for msg, outcome in zip(batch, outcomes, strict=True):
        if msg.tx_id in bad:
            assert isinstance(outcome, RowRefusedError), (msg.tx_id, outcome)
            assert outcome.tx_id == msg.tx_id and outcome.kind is RowFault.ROW_INVALID
            assert bad[msg.tx_id][1] in str(outcome), str(outcome)
        else:
            assert isinstance(outcome, HalfStored), (msg.tx_id, outcome)
            assert outcome.tx_id == msg.tx_id and outcome.position is not None
    # each good row's position is the stream message that carries its own tx_id and header
    by_seq = {m.seq: m for m in stored(nats_server.url, "WIRE2")}
    assert len(by_seq) == len(good)
    for msg, outcome in zip(batch, outcomes, strict=True):
        if isinstance(outcome, HalfStored):
            kept = by_seq[outcome.queue_offset]
            assert outcome.position == f"WIRE2:{outcome.queue_offset}"
            assert kept.tx_id == msg.tx_id and kept.headers["trace"] == msg.properties["trace"]
            assert kept.headers[EXPECTED_STREAM_HEADER] == "WIRE2"
    # the connection is still good: the next batch is published
    again = publisher.send_halves([_msg("after", "Wire2")])
    assert isinstance(again[0], HalfStored) and again[0].queue_offset == len(good) + 1


def test_the_wire_refuses_a_topic_that_is_no_subject_and_a_tx_id_that_is_no_header() -> None:
    assert topic_wire("Orders", "S").problem is None
    for topic in ("", "two words", "line\r\nPUB x 1"):
        problem = topic_wire(topic, "S").problem
        assert problem is not None and f"topic {topic!r}" in problem
    for tx_id in ("", "a\nb", " padded "):
        head = row_head(_msg(tx_id), topic_wire("Orders", "S").tail)
        assert isinstance(head, str) and f"tx_id {tx_id!r}" in head
    head = row_head(_msg("T", properties={"é": "1"}), b"\r\n\r\n")
    assert isinstance(head, str) and "header 'é'" in head


def test_a_nats_py_without_the_internals_a_batch_is_written_through_fails_naming_it() -> None:
    with pytest.raises(ConfigurationError, match=r"nats-py .*lacks .*_send_command") as caught:
        check_client(object())
    assert caught.value.setting == "nats-py"
