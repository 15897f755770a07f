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

from typing import Any

from outbox.inbox import InboxAdapter, inbox_key

__all__ = ["RocketMQInbox"]


class RocketMQInbox(InboxAdapter):
    """Runs ``handler(session, message)`` once per ``tx_id`` for consumer group ``group``."""

    def handle(self, message: Any) -> bool:
        """Process one received message; True when it may be acked (processed or a
        duplicate), False when the handler failed (let it become visible again)."""
        return self._process(inbox_key(message), message,
                             int(getattr(message, "delivery_attempt", 0) or 1))
