"""The inventory consumer on Apache RocketMQ 5: the official ``SimpleConsumer`` and the inbox.

Used when the shop's broker is a ``rocketmq://`` address (the demo's
``--target rocketmq-proxy``). Same group, topic and handler as the native
consumer in :mod:`examples.flask_shop.inventory`; the inbox keys on the row's
``tx_id`` (the ``ROCKETBOX_TX_ID`` property), so the two messages RocketMQ can
hold for one row (a half sent twice) reserve stock once.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any

from rocketmq import FilterExpression, SimpleConsumer
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from examples.flask_shop.inventory import GROUP, TOPIC, InboxCounts, reserve_order
from outbox import Outbox
from outbox.inbox import inbox_key
from outbox.inbox_rocketmq import RocketMQInbox
from outbox.targets.rocketmq import client_configuration

__all__ = ["RocketMQInventoryConsumer"]

log = logging.getLogger(__name__)

#: messages asked for per receive, and how long a received one stays invisible (seconds)
BATCH, INVISIBLE = 16, 30
#: long-poll wait of one receive (seconds), and the pause after a failed one
AWAIT, RETRY = 1, 1.0


def reserve(session: Session, message: Any) -> None:
    """One reservation per order, in the inbox's transaction (RocketMQ's message)."""
    reserve_order(session, message.body, inbox_key(message))


class RocketMQInventoryConsumer(InboxCounts):
    """Receives ``Orders`` in a thread until closed; counts like ``InboxConsumer``."""

    def __init__(self, engine: Engine, broker: str, *, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        outbox = Outbox(engine=engine, broker=broker, access_key=access_key,
                        secret_key=secret_key)
        self._inbox = RocketMQInbox(GROUP, reserve, outbox=outbox)
        self._consumer = SimpleConsumer(client_configuration(outbox), GROUP,
                                        {TOPIC: FilterExpression()}, await_duration=AWAIT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inventory-rocketmq",
                                        daemon=True)

    def __enter__(self) -> RocketMQInventoryConsumer:
        self._consumer.startup()
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=AWAIT + 10)
        self._consumer.shutdown()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self._consumer.receive(BATCH, INVISIBLE)
            except Exception as exc:  # the proxy restarting, a route not there yet: again
                log.warning("inventory: receive failed (%s); again in %.0fs", exc, RETRY)
                self._stop.wait(RETRY)
                continue
            for message in messages:
                if not self._inbox.handle(message):  # the handler failed: seen again later
                    continue
                try:  # processed now or before: ack
                    self._consumer.ack(message)
                except Exception as exc:  # redelivered after INVISIBLE; the inbox skips it
                    log.warning("inventory: ack failed (%s)", exc)
