"""The inventory consumer on RabbitMQ: aio-pika and the inbox.

Used when the shop's broker is an ``amqp://`` address (the demo's ``--target
rabbitmq``). Same group, topic and handler as the native consumer in
:mod:`examples.flask_shop.inventory`; the shop's ``Orders`` is a stream, read
from its first offset, and the inbox keys on the AMQP ``message_id`` (the
row's ``tx_id``), so a row the relay sent twice reserves stock once.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any

import aio_pika
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from examples.flask_shop.inventory import GROUP, TOPIC, InboxCounts, reserve_order
from outbox import Outbox
from outbox.inbox_rabbitmq import RabbitMQInbox, rabbitmq_key
from outbox.targets.rabbitmq import AmqpSettings

__all__ = ["RabbitMQInventoryConsumer"]

#: unacknowledged messages the node may send ahead
PREFETCH = 64


def reserve(session: Session, message: Any) -> None:
    """One reservation per order, in the inbox's transaction (an AMQP message)."""
    reserve_order(session, message.body, rabbitmq_key(message))


class RabbitMQInventoryConsumer(InboxCounts):
    """Consumes the ``Orders`` stream on a loop thread until closed; counts like
    ``InboxConsumer``."""

    def __init__(self, engine: Engine, broker: str, *, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        outbox = Outbox(engine=engine, broker=broker, access_key=access_key,
                        secret_key=secret_key)
        self._settings = AmqpSettings.of(outbox)
        self._inbox = RabbitMQInbox(GROUP, reserve, outbox=outbox)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="inventory-rabbitmq", daemon=True)
        self._connection: Any = None

    async def _start(self) -> None:
        self._connection = await aio_pika.connect(self._settings.url, timeout=30)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=PREFETCH)
        queue = await channel.get_queue(TOPIC, ensure=False)
        await queue.consume(self._inbox.on_message, arguments={"x-stream-offset": "first"})

    def __enter__(self) -> RabbitMQInventoryConsumer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(60)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._connection is not None:
            asyncio.run_coroutine_threadsafe(self._connection.close(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
