"""The inbox: effectively-once consumption (docs/design.md §3D).

Delivery from the broker is at least once: a crash between the handler's
commit and the ack, or a rebalance, delivers a message again. The inbox
turns that into effectively-once processing. For each message the wrapper

1. opens a DB transaction and inserts ``(consumer_group, tx_id)`` into
   ``rocketbox_inbox`` (``tx_id`` is the message's ``ROCKETBOX_TX_ID``
   property, which the relay sets on either broker, else
   :attr:`ReceivedMessage.dedupe_key`; :func:`inbox_key`);
2. if that row already exists, the message was processed before: it is
   skipped (and counted) and acked;
3. otherwise runs ``handler(session, message)`` in the same transaction and
   commits; the broker is acked after the commit.

A handler exception rolls everything back (the inbox row too) and the
message comes back later (``RECONSUME_LATER``). Two deliveries racing each
other serialize on the inbox key: the second waits for the first and, if it
committed, skips.

Use the :func:`consumer` decorator or the :class:`InboxConsumer` class::

    @consumer("Orders", "billing", outbox=outbox)
    def on_order(session: Session, message: ReceivedMessage) -> None:
        session.add(Invoice(order=json.loads(message.body)))

    on_order.start()      # a broker_lite PushConsumer in the background
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from broker_lite.client import ConsumeResult, PushConsumer, ReceivedMessage
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.metrics import observe_inbox_duplicate
from outbox.models import inbox_table
from outbox.targets.base import dedupe_key
from outbox.tracing import consumer_span

__all__ = ["Handler", "InboxAdapter", "InboxConsumer", "consumer", "inbox_key", "process_once"]

log = logging.getLogger("rocketbox.inbox")

#: ``handler(session, message)``: the session's transaction commits with the inbox row
Handler = Callable[[Session, ReceivedMessage], Any]


def inbox_key(message: Any) -> str:
    """What the inbox de-duplicates on: the row's ``tx_id``, whichever broker delivered.

    The relay puts it in every message's ``ROCKETBOX_TX_ID`` property (on
    RocketMQ the message id is the half's UNIQ_KEY, one per half, not per
    row); a message without it falls back to its ``dedupe_key`` (broker_lite:
    the transaction id, which the relay makes the ``tx_id``).
    """
    return dedupe_key(message)  # the target seam reads it


def process_once(sessions: sessionmaker[Session], group: str, key: str,
                 run: Callable[[Session], Any], *, delivery: int = 1) -> str:
    """Run ``run(session)`` with the inbox row of ``(group, key)`` in one DB transaction.

    Returns ``processed``, ``duplicates`` (the row existed: skipped) or
    ``failed`` (``run`` raised: everything rolled back, to be delivered again).
    """
    try:
        with sessions() as session, session.begin():
            # The inbox row goes first: a duplicate fails here, before the handler
            # wrote anything, and the whole transaction is thrown away.
            try:
                session.execute(insert(inbox_table).values(
                    consumer_group=group, tx_id=key, processed_at=datetime.now(UTC)))
            except IntegrityError:
                raise _AlreadyProcessed from None
            run(session)
    except _AlreadyProcessed:
        observe_inbox_duplicate(group)  # it never raises
        log.info("%s: %s already processed; skipped", group, key,
                 extra={"tx_id": key, "group": group})
        return "duplicates"
    except Exception:
        log.exception("%s: handler failed on %s (delivery %d); rolled back, it comes "
                      "back later", group, key, delivery, extra={"tx_id": key, "group": group})
        return "failed"
    return "processed"


class InboxAdapter:
    """What the inbox adapters of the other brokers' clients share (RocketMQ's, NATS's,
    RabbitMQ's): run ``handler(session, message)`` once per ``tx_id`` for consumer group
    ``group``, counting what happened. Each adapter finds the message's key and delivery
    count in its client's terms and calls :meth:`_process`."""

    def __init__(self, group: str, handler: Callable[[Session, Any], Any], *,
                 outbox: Outbox) -> None:
        self.group = group
        self.handler = handler
        self._sessions: sessionmaker[Session] = outbox.sessionmaker()
        self._lock = threading.Lock()
        self.counts = {"processed": 0, "duplicates": 0, "failed": 0}

    def _process(self, key: str, message: Any, delivery: int) -> bool:
        """:func:`process_once` for ``message``; True when it may be acked (processed now
        or before), False when the handler failed (it must come again)."""
        outcome = process_once(self._sessions, self.group, key,
                               lambda session: self.handler(session, message),
                               delivery=delivery)
        with self._lock:
            self.counts[outcome] += 1
        return outcome != "failed"


class _AlreadyProcessed(Exception):
    """The inbox row exists: this delivery is a redelivery."""


class InboxConsumer:
    """A push consumer whose handler runs in a DB transaction with its dedupe row.

    Give ``outbox`` (its engine and broker address) or ``engine`` and
    ``server``. Further keywords go to :class:`~broker_lite.client.PushConsumer`
    (``consume_threads``, ``orderly``, ``max_reconsume_times`` ...).
    ``processed`` and ``duplicates`` count what this instance did.
    """

    def __init__(self, topic: str, group: str, handler: Handler, *,
                 outbox: Outbox | None = None, engine: Engine | None = None,
                 server: str | None = None, tag_expr: str = "*",
                 **consumer_options: Any) -> None:
        if engine is None and outbox is None:
            raise ConfigurationError("InboxConsumer needs outbox= or engine=")
        self.topic = topic
        self.group = group
        self.handler = handler
        self.tag_expr = tag_expr
        if engine is None:
            assert outbox is not None
            engine = outbox.engine
        self.engine: Engine = engine
        # the target says whether outbox.broker is a native door, and what to use if not
        address = server or (outbox.target_address.native_door("InboxConsumer")
                             if outbox is not None else None)
        if address is None:
            raise ConfigurationError("InboxConsumer needs server= (HOST:PORT) or outbox=")
        self.server: str = address
        if outbox is not None and "access_key" not in consumer_options:
            consumer_options.setdefault("access_key", outbox.access_key)
            consumer_options.setdefault("secret_key", outbox.secret_key)
        self._options = consumer_options
        self._sessions = sessionmaker(self.engine)
        self._lock = threading.Lock()
        self._consumer: PushConsumer | None = None
        self.processed = 0
        self.duplicates = 0
        self.failed = 0

    # -- one message -------------------------------------------------------------

    def handle(self, message: ReceivedMessage) -> ConsumeResult:
        """Process one delivery (the listener; also callable directly, e.g. in tests).

        With OpenTelemetry installed this runs in a span that continues the
        message's trace (its ``traceparent`` property; :mod:`outbox.tracing`).
        """
        with consumer_span(message.topic, self.group, message.properties,
                           {"messaging.message.id": inbox_key(message)}):
            return self._process(message)

    def _process(self, message: ReceivedMessage) -> ConsumeResult:
        outcome = process_once(self._sessions, self.group, inbox_key(message),
                               lambda session: self.handler(session, message),
                               delivery=message.reconsume_times + 1)
        self._count(outcome)
        return ConsumeResult.RECONSUME_LATER if outcome == "failed" else ConsumeResult.SUCCESS

    def _count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Subscribe and start consuming in the background."""
        if self._consumer is not None:
            return
        push = PushConsumer(self.group, self.server, listener=self.handle,
                            tag_expr=self.tag_expr, **self._options)
        push.subscribe(self.topic, self.tag_expr)
        push.start()
        self._consumer = push
        log.info("inbox consumer %s on %s started", self.group, self.topic)

    def shutdown(self) -> None:
        push, self._consumer = self._consumer, None
        if push is not None:
            push.shutdown()

    def __enter__(self) -> InboxConsumer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def consumer(topic: str, group: str, *, outbox: Outbox | None = None,
             engine: Engine | None = None, server: str | None = None, tag_expr: str = "*",
             **consumer_options: Any) -> Callable[[Handler], InboxConsumer]:
    """Decorate ``handler(session, message)`` into an :class:`InboxConsumer` (not started)."""

    def wrap(handler: Handler) -> InboxConsumer:
        return InboxConsumer(topic, group, handler, outbox=outbox, engine=engine,
                             server=server, tag_expr=tag_expr, **consumer_options)

    return wrap
