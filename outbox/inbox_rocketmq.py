"""The inbox for messages the official RocketMQ 5 client received (``SimpleConsumer``).

The same effectively-once rule as :mod:`outbox.inbox`, keyed on the same
``tx_id`` (:func:`~outbox.inbox.inbox_key`: the ``ROCKETBOX_TX_ID`` property
the relay sets), so a consumer that moves from broker_lite to RocketMQ keeps
its inbox rows, and two messages for one row (RocketMQ stores every half it
is sent) are processed once::

    inbox = RocketMQInbox("billing", on_order, outbox=outbox)
    for message in simple_consumer.receive(16, 30):
        if inbox.handle(message):
            simple_consumer.ack(message)   # processed now, or before
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from outbox.config import Outbox
from outbox.inbox import inbox_key, process_once

__all__ = ["RocketMQInbox"]


class RocketMQInbox:
    """Runs ``handler(session, message)`` once per ``tx_id`` for consumer group ``group``."""

    def __init__(self, group: str, handler: Callable[[Session, Any], Any], *,
                 outbox: Outbox) -> None:
        self.group = group
        self.handler = handler
        self._sessions: sessionmaker[Session] = outbox.sessionmaker()
        self._lock = threading.Lock()
        self.counts = {"processed": 0, "duplicates": 0, "failed": 0}

    def handle(self, message: Any) -> bool:
        """Process one received message; True when it may be acked (processed or a
        duplicate), False when the handler failed (let it become visible again)."""
        outcome = process_once(self._sessions, self.group, inbox_key(message),
                               lambda session: self.handler(session, message),
                               delivery=int(getattr(message, "delivery_attempt", 0) or 1))
        with self._lock:
            self.counts[outcome] += 1
        return outcome != "failed"
