"""The RabbitMQ side of the audit: what a stream holds, as ``rocketbox broker-export`` writes it.

A RabbitMQ stream (``x-queue-type=stream``) can be read again from its first
offset without taking anything from anyone: the export consumes each stream
over AMQP 0-9-1 from ``x-stream-offset=first`` and writes one
:class:`~outbox.broker_export.ExportedMessage` per message:

* ``tx_id``: the ``message_id`` (the relay sets it to the row's ``tx_id``);
* ``position``: ``STREAM:OFFSET``, the message's offset in the stream (the
  ``x-stream-offset`` header RabbitMQ puts on every message it delivers from a
  stream);
* ``time_ms``: the ``rocketbox-published-ms`` header the target set when it
  published (else the AMQP ``timestamp``, whole seconds; else 0);
* ``body_sha256``: the body's SHA-256, hex;
* ``destination``: the stream's name.

A quorum or classic queue cannot be re-read (a read takes the messages), so
it is refused: publish through an exchange (``?exchange=NAME``) that routes
each message both to the consumers' queue and to a stream kept for the audit,
and export that stream. ``source`` (``--source``) names the streams,
comma-separated: AMQP 0-9-1 cannot list them.

RabbitMQ 3.10 tells no stream's last offset over AMQP (a passive declare's
message count is an estimate), so the read ends once it has at least that
many messages and then none came for :data:`IDLE_END` seconds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiormq.exceptions as amqp_errors
from aio_pika.abc import AbstractIncomingMessage

from outbox.broker_export import ExportedMessage, body_sha256, write_export
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.targets.rabbitmq_amqp import PUBLISHED_MS_HEADER, AmqpSettings, connect

__all__ = ["IDLE_END", "export_messages", "exported", "read_stream"]

#: the read of a stream ends after this long (seconds) without a message, once it has
#: at least the message count the broker gave
IDLE_END = 2.0
#: how many unacknowledged messages the broker may send ahead
PREFETCH = 1000
#: the export header RabbitMQ sets on a message delivered from a stream
OFFSET_HEADER = "x-stream-offset"


def exported(message: AbstractIncomingMessage, stream: str) -> ExportedMessage:
    """One delivered stream message as an export line."""
    headers = message.headers or {}
    published = headers.get(PUBLISHED_MS_HEADER)
    if isinstance(published, int):
        time_ms = published
    elif message.timestamp is not None:
        time_ms = int(message.timestamp.timestamp() * 1000)
    else:
        time_ms = 0
    return ExportedMessage(tx_id=message.message_id or "",
                           position=f"{stream}:{int(str(headers[OFFSET_HEADER]))}",
                           time_ms=time_ms,
                           body_sha256=body_sha256(message.body),
                           destination=stream)


async def read_stream(settings: AmqpSettings, stream: str, *,
                      idle: float = IDLE_END) -> list[ExportedMessage]:
    """Every message ``stream`` holds, from its first offset, in offset order."""
    connection = await connect(settings, name=f"{settings.app_id}-export")
    try:
        channel = await connection.channel()
        try:
            queue = await channel.declare_queue(stream, passive=True)
        except amqp_errors.ChannelNotFoundEntity:
            raise ConfigurationError(f"--source: RabbitMQ at {settings.shown} has no queue "
                                     f"{stream!r}", setting="source") from None
        expected = queue.declaration_result.message_count or 0
        await channel.set_qos(prefetch_count=PREFETCH)
        messages: list[ExportedMessage] = []
        arrived = asyncio.Event()
        not_a_stream: list[str] = []

        async def on_message(message: AbstractIncomingMessage) -> None:
            if OFFSET_HEADER not in (message.headers or {}):
                not_a_stream.append(stream)  # never acked: the channel's close gives it back
                arrived.set()
                return
            messages.append(exported(message, stream))
            await message.ack()
            arrived.set()

        try:  # a quorum queue refuses the offset argument; a classic one ignores it
            await queue.consume(on_message, arguments={OFFSET_HEADER: "first"})
        except amqp_errors.ChannelPreconditionFailed:
            not_a_stream.append(stream)
        while not not_a_stream:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), idle)
            except TimeoutError:
                if len(messages) >= expected:
                    break
        if not_a_stream:
            raise ConfigurationError(
                f"--source: {stream!r} is not a stream (a read would take its messages); "
                f"export a stream (x-queue-type=stream) that the exchange also routes to",
                setting="source")
        return sorted(messages, key=lambda m: int(m.position.rpartition(":")[2]))
    finally:
        await connection.close()


def _streams(source: str | None) -> list[str]:
    names = [name.strip() for name in (source or "").split(",") if name.strip()]
    if not names:
        raise ConfigurationError("--source: name the stream(s) to export (comma-separated); "
                                 "AMQP 0-9-1 cannot list a vhost's streams", setting="source")
    return names


def export_messages(outbox: Outbox, out: Path, *, source: str | None = None) -> int:
    """Write every message of the streams ``source`` names to ``out``; return how many."""
    settings = AmqpSettings.of(outbox)
    streams = _streams(source)

    async def read_all() -> list[ExportedMessage]:
        every: list[ExportedMessage] = []
        for stream in streams:
            every.extend(await read_stream(settings, stream))
        return every

    written: int = write_export(asyncio.run(read_all()), out)
    return written
