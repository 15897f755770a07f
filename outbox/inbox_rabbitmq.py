"""The inbox for messages an aio-pika consumer received from RabbitMQ.

The same effectively-once rule as :mod:`outbox.inbox`, keyed on the same
``tx_id`` (the AMQP ``message_id``, which the relay sets to the row's
``tx_id``; else the ``ROCKETBOX_TX_ID`` header it also sets), so a row the
relay sent twice (it died between the broker's confirm and marking the row)
is processed once. The handler runs in the inbox row's DB transaction; the
message is acked only after that transaction committed, so a crash before the
ack gives a redelivery, which the inbox row turns into a skip::

    inbox = RabbitMQInbox("billing", on_order, outbox=outbox)
    await queue.consume(inbox.on_message)          # acks after the commit

A handler that raises rolls everything back (the inbox row too) and the
message is rejected with ``requeue=True``: it comes back (a quorum queue
counts the redelivery against its ``x-delivery-limit``, if one is set).
The handler is sync (the DB work is SQLAlchemy's); :meth:`RabbitMQInbox.on_message`
runs it on a worker thread, so the event loop goes on meanwhile.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from outbox.errors import ConfigurationError
from outbox.inbox import InboxAdapter
from outbox.targets.base import TX_ID_PROPERTY

__all__ = ["AmqpDelivery", "RabbitMQInbox", "rabbitmq_key"]


class AmqpDelivery(Protocol):
    """What the inbox reads of a delivered message (aio-pika's ``IncomingMessage`` has it)."""

    @property
    def message_id(self) -> str | None: ...

    @property
    def headers(self) -> Any: ...

    @property
    def redelivered(self) -> bool | None: ...

    async def ack(self, multiple: bool = False) -> None: ...

    async def reject(self, requeue: bool = False) -> None: ...


def rabbitmq_key(message: AmqpDelivery) -> str:
    """The ``tx_id`` a delivered message carries: its ``message_id``, else the header.

    A message with neither did not come from the relay:
    :class:`~outbox.errors.ConfigurationError` naming ``message_id``.
    """
    if message.message_id:
        return message.message_id
    key = (message.headers or {}).get(TX_ID_PROPERTY)
    if key:
        return str(key)
    raise ConfigurationError(f"a message with no message_id and no {TX_ID_PROPERTY} header: "
                             f"the inbox de-duplicates on the tx_id the relay sets there",
                             setting="message_id")


class RabbitMQInbox(InboxAdapter):
    """Runs ``handler(session, message)`` once per ``tx_id`` for consumer group ``group``."""

    def handle(self, message: AmqpDelivery) -> bool:
        """Process one delivered message (sync); True when it may be acked (processed now
        or before), False when the handler failed (reject it for a redelivery)."""
        return self._process(rabbitmq_key(message), message, 2 if message.redelivered else 1)

    async def on_message(self, message: AmqpDelivery) -> None:
        """An aio-pika consumer callback: :meth:`handle` on a thread, then ack or requeue."""
        if await asyncio.to_thread(self.handle, message):
            await message.ack()
        else:
            await message.reject(requeue=True)
