"""The inventory consumer on NATS JetStream: a nats-py pull consumer and the NATS inbox.

Used when the shop's broker is a ``nats://`` address (the demo's ``--target
nats``). Same group, topic and table as the native consumer in
:mod:`examples.flask_shop.inventory`; the inbox keys on ``Nats-Msg-Id`` (the
row's ``tx_id``), so a row the relay published twice (a relay killed between
the stream's ack and its mark) reserves stock once. The durable consumer
``inventory`` reads the stream that binds ``Orders`` with explicit acks, sent
after the reservation commits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from types import TracebackType
from typing import Any

import nats
import nats.errors
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from examples.flask_shop.inventory import GROUP, TOPIC, InboxCounts, reserve_order
from outbox import Outbox
from outbox.inbox_nats import NatsInbox, nats_inbox_key

__all__ = ["NatsInventoryConsumer"]

log = logging.getLogger(__name__)

#: messages asked for per fetch, its long-poll (seconds), the pause after a failure
BATCH, AWAIT, RETRY = 16, 1.0, 1.0


def reserve(session: Session, message: Any) -> None:
    """One reservation per order, in the inbox's transaction (a NATS message)."""
    reserve_order(session, message.data, nats_inbox_key(message))


class NatsInventoryConsumer(InboxCounts):
    """Fetches ``Orders`` in a thread (its own event loop) until closed."""

    def __init__(self, engine: Engine, broker: str, *, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        self._outbox = Outbox(engine=engine, broker=broker, access_key=access_key,
                              secret_key=secret_key)
        self._inbox = NatsInbox(GROUP, reserve, outbox=self._outbox, nak_delay=1.0)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="inventory-nats", daemon=True)

    def __enter__(self) -> NatsInventoryConsumer:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=AWAIT + 10)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _run(self) -> None:
        outbox = self._outbox
        options: dict[str, Any] = {}
        if outbox.access_key:
            options.update(user=outbox.access_key, password=outbox.secret_key or "")
        servers = [f"{'tls' if outbox.target_address.tls else 'nats'}://{e}"
                   for e in outbox.target_address.endpoint_strings()]
        client = await nats.connect(servers=servers, max_reconnect_attempts=-1, **options)
        try:
            js = client.jetstream(timeout=10)
            stream = await js.find_stream_name_by_subject(TOPIC)
            sub = await js.pull_subscribe("", durable=GROUP, stream=stream)
            self._ready.set()
            while not self._stop.is_set():
                try:
                    batch = await sub.fetch(BATCH, timeout=AWAIT)
                except nats.errors.TimeoutError:
                    continue
                except Exception as exc:  # the server restarting: again
                    log.warning("inventory: fetch failed (%s); again in %.0fs", exc, RETRY)
                    await asyncio.sleep(RETRY)
                    continue
                for msg in batch:
                    try:
                        await self._inbox.consume(msg)
                    except Exception as exc:  # the ack lost: redelivered, the inbox skips it
                        log.warning("inventory: ack failed (%s)", exc)
        finally:
            await client.close()
