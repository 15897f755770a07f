"""What a JetStream stream holds, as the audit's broker export (:mod:`outbox.broker_export`).

Each stored message becomes one ``ExportedMessage``: ``tx_id`` from its
``Nats-Msg-Id`` header (empty for a message the relay did not publish),
``position`` ``STREAM:SEQ``, ``time_ms`` the server's store time,
``body_sha256`` of the body as stored and ``destination`` its subject. The
messages are read by sequence from the stream's first to its last
(``STREAM.MSG.GET``, a window of requests in flight at once); a sequence
deleted meanwhile is skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats.js.errors
from nats.js import JetStreamContext

from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.targets.nats import MSG_ID_HEADER, connect

__all__ = ["IN_FLIGHT", "export_messages", "read_stream"]

#: stream reads in flight at once
IN_FLIGHT = 64


async def read_stream(js: JetStreamContext, stream: str) -> list[Any]:
    """Every message stored in ``stream`` now, in sequence order (``ExportedMessage`` s)."""
    from outbox.broker_export import ExportedMessage

    info = await js.stream_info(stream)
    first, last = int(info.state.first_seq or 0), int(info.state.last_seq or 0)
    found: list[Any] = []

    async def one(seq: int) -> Any:
        try:
            msg = await js.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            return None  # deleted (or purged) since the stream's state was read
        headers = msg.headers or {}
        time_ms = int(msg.time.timestamp() * 1000) if msg.time is not None else 0
        return ExportedMessage(tx_id=str(headers.get(MSG_ID_HEADER, "")),
                               position=f"{stream}:{seq}", time_ms=time_ms,
                               body_sha256=hashlib.sha256(msg.data or b"").hexdigest(),
                               destination=str(msg.subject or ""))

    if first < 1:
        return found
    for start in range(first, last + 1, IN_FLIGHT):
        window = range(start, min(last, start + IN_FLIGHT - 1) + 1)
        found.extend(m for m in await asyncio.gather(*(one(seq) for seq in window))
                     if m is not None)
    return found


async def _export(outbox: Outbox, source: str | None) -> list[Any]:
    client = await connect(outbox, name=f"{outbox.producer_group}-export")
    try:
        js = client.jetstream(timeout=outbox.relay.broker_timeout)
        if source is not None:
            streams = [source]
        else:
            streams = [info.config.name for info in await js.streams_info()
                       if info.config.name]
        messages: list[Any] = []
        for stream in streams:
            try:
                messages.extend(await read_stream(js, stream))
            except nats.js.errors.NotFoundError as exc:
                raise ConfigurationError(f"--source {stream!r}: no such JetStream stream on "
                                         f"{outbox.broker_display}", setting="source") from exc
        return messages
    finally:
        await client.close()


def export_messages(outbox: Outbox, out: Path, *, source: str | None) -> int:
    """Write what stream ``source`` (None: every stream of the account) holds to ``out``."""
    from outbox.broker_export import write_export

    messages = asyncio.run(_export(outbox, source))
    return write_export(_each(messages), out)


def _each(messages: list[Any]) -> Iterator[Any]:
    yield from messages
