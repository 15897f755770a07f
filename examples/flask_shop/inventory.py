"""The inventory service: consumes ``OrderCreated`` through the inbox (effectively once).

Every order reserves stock in the inventory's own database. The inbox row
``(group, tx_id)`` is written in the handler's transaction, so a redelivered
message is skipped and stock is never reserved twice.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import signal
import threading
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, Integer, String, create_engine, insert, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from broker_lite.client import ReceivedMessage
from outbox.inbox import InboxConsumer
from outbox.targets.address import parse_broker_address

if TYPE_CHECKING:
    from typing import TypeAlias

    from examples.flask_shop.inventory_nats import NatsInventoryConsumer
    from examples.flask_shop.inventory_rabbitmq import RabbitMQInventoryConsumer
    from examples.flask_shop.inventory_rocketmq import RocketMQInventoryConsumer

    Consumer: TypeAlias = (InboxConsumer | RocketMQInventoryConsumer | NatsInventoryConsumer
                           | RabbitMQInventoryConsumer)

GROUP = "inventory"
TOPIC = "Orders"


class Base(DeclarativeBase):
    pass


class Reservation(Base):
    __tablename__ = "inventory_reservation"

    tx_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    order_ref: Mapped[str] = mapped_column(String(64))
    item: Mapped[str] = mapped_column(String(64))
    qty: Mapped[int] = mapped_column(Integer)


def create_tables(engine: Engine) -> None:
    Base.metadata.create_all(engine)


def migrate(url: str) -> None:
    """The inventory's tables and the outbox tables (its inbox) in the database at ``url``."""
    from outbox import migrate as outbox_migrate

    engine = create_engine(url)
    try:
        create_tables(engine)
        outbox_migrate.upgrade(engine)
    finally:
        engine.dispose()


def reserve_order(session: Session, body: bytes | str, tx_id: str) -> None:
    """One reservation for the order in ``body`` (JSON), keyed by the row's ``tx_id``; every
    consumer's handler calls it in the inbox's transaction."""
    order = json.loads(body)
    session.execute(insert(Reservation).values(
        tx_id=tx_id, order_ref=order["ref"], item=order["item"], qty=int(order["qty"])))


def reserve(session: Session, message: ReceivedMessage) -> None:
    """The native consumer's handler: one reservation per order."""
    reserve_order(session, message.body, message.dedupe_key)


class InboxCounts:
    """``processed`` and ``duplicates`` of a consumer's inbox adapter, as
    :class:`~outbox.inbox.InboxConsumer` counts them (the demo reads them)."""

    _inbox: Any

    @property
    def processed(self) -> int:
        return int(self._inbox.counts["processed"])

    @property
    def duplicates(self) -> int:
        return int(self._inbox.counts["duplicates"])


#: the consumer of each kind of broker that broker_lite's native door does not serve:
#: its module and class (imported on use, so a shop on broker_lite needs none of their
#: clients)
OTHER_CONSUMERS = {
    "rocketmq": ("examples.flask_shop.inventory_rocketmq", "RocketMQInventoryConsumer"),
    "nats": ("examples.flask_shop.inventory_nats", "NatsInventoryConsumer"),
    "rabbitmq": ("examples.flask_shop.inventory_rabbitmq", "RabbitMQInventoryConsumer"),
}


def make_consumer(engine: Engine, broker: str, **options: object) -> Consumer:
    """The inventory consumer (not started): the native one, or the one in
    :data:`OTHER_CONSUMERS` for the address's kind (``rocketmq://``, ``nats://``,
    ``amqp://``)."""
    address = parse_broker_address(broker, setting="SHOP_BROKER")
    other = OTHER_CONSUMERS.get(address.kind)
    if other is not None:
        module, name = other
        consumer = getattr(importlib.import_module(module), name)
        return cast("Consumer", consumer(engine, broker, **options))
    return InboxConsumer(TOPIC, GROUP, reserve, engine=engine, server=address.native,
                         rebalance_interval=1.0, **options)  # type: ignore[arg-type]


def reserved(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM inventory_reservation")).scalar_one())


def serve(url: str, broker: str, **options: object) -> int:
    """Run the consumer until SIGTERM (or ^C); prints ``inventory ready``, then its counts.

    ``options`` go to :func:`make_consumer` (``access_key``, ``secret_key`` ...).
    """
    engine = create_engine(url, connect_args={"timeout": 30} if url.startswith("sqlite") else {})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    consumer = make_consumer(engine, broker, **options)
    with consumer:
        print("inventory ready", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
    print(f"inventory processed={consumer.processed} duplicates={consumer.duplicates}",
          flush=True)
    engine.dispose()
    return 0
