"""The inbox for messages a nats-py JetStream subscription delivered.

The same effectively-once rule as :mod:`outbox.inbox` (the ``rocketbox_inbox``
table, one row per consumer group and ``tx_id``), keyed on the message's
``Nats-Msg-Id`` header: the ``tx_id`` the relay published it with. A
re-sent row that the stream's duplicate window did not drop (a re-send
after the window), and every redelivery, is processed once. The ack is
explicit and comes after the business transaction committed; a handler
that failed naks the message, so JetStream delivers it again::

    inbox = NatsInbox("billing", on_order, outbox=outbox)
    sub = await js.pull_subscribe("Orders.>", durable="billing", stream="ORDERS")
    for msg in await sub.fetch(32, timeout=5):
        await inbox.consume(msg)       # handler + inbox row in one transaction, then ack

``handler(session, msg)`` runs in a worker thread (the database is sync);
the subscription's consumer should use explicit acks (``AckPolicy.EXPLICIT``,
nats-py's default for ``pull_subscribe``). A message without
``Nats-Msg-Id`` (published by something else than the relay) is keyed on its
``STREAM:SEQ``, which de-duplicates its redeliveries only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from outbox.config import Outbox
from outbox.inbox import InboxAdapter

__all__ = ["MSG_ID_HEADER", "NatsInbox", "nats_inbox_key"]

#: the header the relay puts the row's ``tx_id`` in (JetStream de-duplicates on it too)
MSG_ID_HEADER = "Nats-Msg-Id"


def nats_inbox_key(msg: Any) -> str:
    """What the inbox de-duplicates ``msg`` on: its ``Nats-Msg-Id``, else ``STREAM:SEQ``."""
    key = (msg.headers or {}).get(MSG_ID_HEADER)
    if key:
        return str(key)
    meta = msg.metadata
    return f"{meta.stream}:{meta.sequence.stream}"


class NatsInbox(InboxAdapter):
    """Runs ``handler(session, msg)`` once per ``tx_id`` for consumer group ``group``."""

    def __init__(self, group: str, handler: Callable[[Session, Any], Any], *,
                 outbox: Outbox, nak_delay: float | None = None,
                 ack_timeout: float = 5.0) -> None:
        super().__init__(group, handler, outbox=outbox)
        #: a failed message comes back after this long (None: as the consumer says)
        self.nak_delay = nak_delay
        #: how long :meth:`consume` waits for the server to confirm an ack (seconds)
        self.ack_timeout = ack_timeout

    def handle(self, msg: Any) -> bool:
        """Process one delivered message (sync, no ack); True when it may be acked
        (processed now or before), False when the handler failed."""
        delivered = 1
        with contextlib.suppress(Exception):  # not a JetStream delivery: a plain message
            delivered = int(msg.metadata.num_delivered or 1)
        return self._process(nats_inbox_key(msg), msg, delivered)

    async def consume(self, msg: Any) -> bool:
        """:meth:`handle` in a worker thread, then ``ack`` it after the commit (waiting for
        the server's confirmation), or ``nak`` it when the handler failed."""
        if await asyncio.to_thread(self.handle, msg):
            await msg.ack_sync(timeout=self.ack_timeout)
            return True
        await msg.nak(delay=self.nak_delay)
        return False
