"""A wave of rows as AMQP frames, written to an aiormq channel at once, each with its own confirm.

aiormq's ``basic_publish`` costs a coroutine (the relay wrapped it in a task),
two context managers, the channel's lock, a ``BytesIO`` and a write-queue put
for every message, and pamqp marshals each row's properties through its
general table encoder. The relay publishes whole waves, so:

* :func:`wave_frames` encodes a row's three frames (``Basic.Publish``, the
  content header, the body) straight to bytes: the publish frame of a
  (channel, exchange, topic) is marshalled once by pamqp and reused; the
  content header is written field by field (the target's properties are a
  fixed set: headers, ``delivery_mode``, ``message_id``, ``type``,
  ``app_id``), byte for byte what pamqp writes (tests/targets/rabbitmq
  checks that);
* :func:`publish_wave` takes the channel's lock once, gives the rows their
  delivery tags in order, registers one confirm future per row where aiormq's
  reader settles them (its ``confirmations``, and ``message_id_delivery_tag``
  for a ``Basic.Return``), and puts the whole wave on the connection's write
  queue as one frame: one socket write.

What the broker sees is what ``basic_publish`` sends, message for message, so
a row is still confirmed only by its own ``Basic.Ack`` (or a ``multiple`` ack
covering its tag), a ``Basic.Nack`` fails its future with
``DeliveryError``, a ``Basic.Return`` with ``PublishError``, and a closed
channel rejects every future still waiting.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from typing import Any

import aiormq
import pamqp.frame
from aiormq import Channel
from aiormq.abc import ChannelFrame
from aiormq.exceptions import ChannelInvalidStateError
from pamqp import commands as spec

from outbox.errors import InvalidMessageError
from outbox.targets.base import TX_ID_PROPERTY, OutgoingMessage
from outbox.targets.internals import require_internals

__all__ = ["RowTooLarge", "check_channel", "forget", "publish_wave", "wave_frames"]

#: the target's headers (``rocketbox-*``) as written; kept here, not imported, so the
#: encoder reads as the wire format it is (outbox.targets.rabbitmq_amqp names them too)
_KEYS = b"rocketbox-keys"
_GROUP = b"rocketbox-group"
_PUBLISHED_MS = b"rocketbox-published-ms"
_TX_ID = TX_ID_PROPERTY.encode()

#: frame types and the frame end (AMQP 0-9-1, 4.2.3)
_HEADER, _BODY, _END = 2, 3, b"\xce"
#: Basic's class id
_BASIC = 60
#: property flags (4.2.6.1): headers, delivery_mode and message_id always; type and app_id
#: when not empty (as pamqp leaves out an empty property)
_FLAGS = (1 << 13) | (1 << 12) | (1 << 7)
_TYPE, _APP_ID = 1 << 5, 1 << 3
_PERSISTENT = 2

_frame_head = struct.Struct(">BHI").pack
_header_head = struct.Struct(">HHQH").pack
_u32 = struct.Struct(">I").pack
_i64 = struct.Struct(">q").pack


class RowTooLarge(InvalidMessageError):
    """A row whose field does not fit its AMQP type (a short string is 255 bytes at most);
    ``field`` names it, ``limit`` is 255. The target refuses that row alone with it."""

    def __init__(self, field: str, size: int) -> None:
        super().__init__(field, f"{field} is {size} bytes encoded, over AMQP's short-string "
                         f"limit of 255 bytes", limit=255)


def _short(value: str, field: str) -> bytes:
    raw = value.encode()
    if len(raw) > 255:
        raise RowTooLarge(field, len(raw))
    return bytes((len(raw),)) + raw


def _long(value: str) -> bytes:
    raw = value.encode()
    return _u32(len(raw)) + raw


def _headers(msg: OutgoingMessage, published_ms: int) -> bytes:
    """The headers table (the target's mapping, rabbitmq_amqp.amqp_headers), encoded;
    the same names and values, so a row's header named like one of the target's is
    overwritten as there."""
    items: dict[str, bytes] = {str(k): b"S" + _long(str(v)) for k, v in msg.properties.items()}
    items[TX_ID_PROPERTY] = b"S" + _long(msg.tx_id)
    if msg.keys:
        items[_KEYS.decode()] = b"S" + _long(" ".join(msg.keys))
    if msg.message_group is not None:
        items[_GROUP.decode()] = b"S" + _long(msg.message_group)
    items[_PUBLISHED_MS.decode()] = b"l" + _i64(published_ms)
    table = b"".join(_short(key, f"header {key[:40]!r}") + value  # sorted, as pamqp writes
                     for key, value in sorted(items.items()))
    return _u32(len(table)) + table


def _content_header(msg: OutgoingMessage, *, app_id: bytes, published_ms: int) -> bytes:
    """The content header's payload: class, weight, body size, flags, the properties
    (in the spec's order: headers, delivery_mode, message_id, type, app_id)."""
    flags = _FLAGS | (_TYPE if msg.tag else 0) | (_APP_ID if app_id else 0)
    return b"".join((_header_head(_BASIC, 0, len(msg.body), flags),
                     _headers(msg, published_ms), bytes((_PERSISTENT,)),
                     _short(msg.tx_id, "tx_id"), _short(msg.tag, "tag") if msg.tag else b"",
                     app_id))


def wave_frames(channel_number: int, exchange: str, msg: OutgoingMessage, *, app_id: str,
                published_ms: int, max_content: int, publish_frames: dict[str, bytes]
                ) -> bytes:
    """The frames one row is published with (``mandatory``, persistent), as bytes.

    ``publish_frames`` caches the ``Basic.Publish`` frame per topic (one dict per
    channel and exchange); ``max_content`` is the channel's largest body frame
    (``frame_max`` - 8). Raises :class:`RowTooLarge` for a field over its limit.
    """
    publish = publish_frames.get(msg.topic)
    if publish is None:
        _short(msg.topic, "topic")  # the routing key is a short string too
        publish = publish_frames[msg.topic] = pamqp.frame.marshal(
            spec.Basic.Publish(exchange=exchange, routing_key=msg.topic, mandatory=True),
            channel_number)
    header = _content_header(msg, app_id=_short(app_id, "producer_group") if app_id else b"",
                             published_ms=published_ms)
    parts = [publish, _frame_head(_HEADER, channel_number, len(header)), header, _END]
    body = msg.body
    for start in range(0, len(body), max_content):
        chunk = body[start:start + max_content]
        parts += (_frame_head(_BODY, channel_number, len(chunk)), chunk, _END)
    return b"".join(parts)


#: what :func:`publish_wave` and :func:`forget` use of an aiormq channel beyond its
#: public API (aiormq 7's; the rabbitmq extra pins ``aiormq<8``)
CHANNEL_INTERNALS = ("confirmations", "message_id_delivery_tag", "delivery_tag", "lock",
                     "write_queue", "create_future", "publisher_confirms", "max_content_size",
                     "number", "is_closed")


def check_channel(channel: object) -> None:
    """Fail fast, naming the package, when an aiormq channel lacks what a wave writes
    through (an aiormq outside the ``rabbitmq`` extra's range): every row would fail."""
    require_internals(channel, Channel, CHANNEL_INTERNALS, target="RabbitMQ",
                      package="aiormq", version=getattr(aiormq, "__version__", "?"),
                      writes="waves", extra="rabbitmq", pin="aiormq>=7.2,<8")


async def publish_wave(channel: Channel, frames: Sequence[tuple[str, bytes]]
                       ) -> tuple[int, list[asyncio.Future[Any]]]:
    """Write ``frames`` (each row's ``(message_id, wave_frames(...))``) as one write on
    ``channel`` (a confirming aiormq channel), in order: the first row's delivery tag
    (for :func:`forget`) and each row's confirm future.

    A future resolves on the row's own ``Basic.Ack``, fails with aiormq's
    ``DeliveryError`` on its ``Basic.Nack`` and ``PublishError`` on its
    ``Basic.Return``, and is rejected when the channel closes. Raises
    ``ChannelInvalidStateError`` on a closed channel (nothing written then).
    """
    if not channel.publisher_confirms:
        raise ChannelInvalidStateError("publish_wave needs a channel with publisher confirms")
    payload = b"".join(frame for _, frame in frames)
    futures: list[asyncio.Future[Any]] = []
    async with channel.lock:
        if channel.is_closed:
            raise ChannelInvalidStateError(f"channel {channel.number} is closed")
        first = channel.delivery_tag + 1
        confirmations, by_id = channel.confirmations, channel.message_id_delivery_tag
        for tag, (message_id, _) in enumerate(frames, first):
            future = channel.create_future()
            confirmations[tag] = future
            by_id[message_id] = tag
            futures.append(future)
        channel.delivery_tag = first + len(frames) - 1
        try:
            await channel.write_queue.put(ChannelFrame(payload=payload, should_close=False))
        except BaseException:  # not written: the broker never saw these tags
            channel.delivery_tag = first - 1
            for tag, (message_id, _) in enumerate(frames, first):
                confirmations.pop(tag, None)
                if by_id.get(message_id) == tag:
                    by_id.pop(message_id)
            for future in futures:
                future.cancel()
            raise
    return first, futures


def forget(channel: Channel, message_ids: Sequence[str], first_tag: int) -> None:
    """Drop the message ids of a settled wave (its rows' tags from ``first_tag`` on) from
    the channel's return lookup (aiormq's ``basic_publish`` does it per message)."""
    by_id = channel.message_id_delivery_tag
    for tag, message_id in enumerate(message_ids, first_tag):
        if by_id.get(message_id) == tag:
            by_id.pop(message_id)
