"""The inventory service: consumes ``OrderCreated`` through the inbox (effectively once).

Every order reserves stock in the inventory's own database. The inbox row
``(group, tx_id)`` is written in the handler's transaction, so a redelivered
message is skipped and stock is never reserved twice.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from typing import TYPE_CHECKING

from sqlalchemy import Engine, Integer, String, create_engine, insert, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from broker_lite.client import ReceivedMessage
from outbox.inbox import InboxConsumer
from outbox.targets.address import parse_broker_address

if TYPE_CHECKING:
    from typing import TypeAlias

    from examples.flask_shop.inventory_rabbitmq import RabbitMQInventoryConsumer
    from examples.flask_shop.inventory_rocketmq import RocketMQInventoryConsumer

    Consumer: TypeAlias = InboxConsumer | RocketMQInventoryConsumer | RabbitMQInventoryConsumer

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


def reserve(session: Session, message: ReceivedMessage) -> None:
    """The handler: one reservation per order (in the inbox's transaction)."""
    order = json.loads(message.body)
    session.execute(insert(Reservation).values(
        tx_id=message.dedupe_key, order_ref=order["ref"], item=order["item"],
        qty=int(order["qty"])))


def make_consumer(engine: Engine, broker: str, **options: object) -> Consumer:
    """The inventory consumer (not started): the native one, RocketMQ's for ``rocketmq://``,
    NATS's for ``nats://``, RabbitMQ's for ``amqp://``."""
    if parse_broker_address(broker, setting="SHOP_BROKER").kind == "nats":
        from examples.flask_shop.inventory_nats import NatsInventoryConsumer

        return NatsInventoryConsumer(engine, broker, **options)  # type: ignore[arg-type,return-value]
    if parse_broker_address(broker, setting="SHOP_BROKER").kind == "rabbitmq":
        from examples.flask_shop.inventory_rabbitmq import RabbitMQInventoryConsumer

        return RabbitMQInventoryConsumer(engine, broker, **options)  # type: ignore[arg-type]
    if parse_broker_address(broker, setting="SHOP_BROKER").is_rocketmq:
        from examples.flask_shop.inventory_rocketmq import RocketMQInventoryConsumer

        return RocketMQInventoryConsumer(engine, broker, **options)  # type: ignore[arg-type]
    return InboxConsumer(TOPIC, GROUP, reserve, engine=engine,
                         server=parse_broker_address(broker).native,
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
