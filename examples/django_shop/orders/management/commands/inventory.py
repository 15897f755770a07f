"""``manage.py inventory``: the inventory consumer, through the inbox (effectively once).

It keeps reservations in its own database (``SHOP_INVENTORY_DB``), with the
inbox table next to them; a redelivered ``OrderCreated`` is skipped.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine, insert
from sqlalchemy.orm import Session

from broker_lite.client import ReceivedMessage
from outbox import migrate
from outbox.inbox import InboxConsumer

metadata = MetaData()
reservations = Table("inventory_reservation", metadata,
                     Column("tx_id", String(64), primary_key=True),
                     Column("order_ref", String(64), nullable=False),
                     Column("item", String(64), nullable=False),
                     Column("qty", Integer, nullable=False))


def reserve(session: Session, message: ReceivedMessage) -> None:
    order = json.loads(message.body)
    session.execute(insert(reservations).values(tx_id=message.dedupe_key,
                                                order_ref=order["ref"], item=order["item"],
                                                qty=int(order["qty"])))


class Command(BaseCommand):
    help = "Consume OrderCreated and reserve stock (inbox dedupe)."

    def handle(self, *args: Any, **options: Any) -> None:
        engine = create_engine(settings.INVENTORY_DB)
        metadata.create_all(engine)
        migrate.upgrade(engine)  # the inbox table
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        consumer = InboxConsumer("Orders", "inventory", reserve, engine=engine,
                                 server=settings.ROCKETBOX["BROKER"], rebalance_interval=1.0)
        with consumer:
            self.stdout.write("inventory ready")
            self.stdout.flush()
            with contextlib.suppress(KeyboardInterrupt):
                stop.wait()
        engine.dispose()
