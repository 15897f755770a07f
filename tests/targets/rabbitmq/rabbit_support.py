"""Helpers for the RabbitMQ target's tests: declare a queue, consume through the inbox.

Everything talks to the real node (tests/support/rabbitmq_server.py) with
aio-pika; waits are on an event set by each delivery, with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Callable
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from outbox import Outbox
from outbox.inbox_rabbitmq import RabbitMQInbox
from outbox.models import transaction_table as t
from tests.support import WaitTimeout, wait_until
from tests.support.rabbitmq_server import RABBITMQ_SERVER, RabbitMQServer

__all__ = [
    "PROCESSED_SQL",
    "Consumer",
    "PublishingBlocked",
    "declare",
    "on_order",
    "processed",
    "queue_depth",
    "relayed_ids",
]

#: the business table the handler writes to: no unique key, so a double processing shows
PROCESSED_SQL = "CREATE TABLE processed (tx_id text NOT NULL, body bytea NOT NULL)"


async def _declare(url: str, name: str, kind: str) -> None:
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel()
        await channel.declare_queue(name, durable=True, arguments={"x-queue-type": kind})


def declare(url: str, name: str, kind: str = "quorum") -> None:
    """Declare a durable queue of ``kind`` (``quorum`` or ``stream``)."""
    asyncio.run(_declare(url, name, kind))


async def _depth(url: str, name: str) -> int:
    connection = await aio_pika.connect(url, timeout=10)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, passive=True)
        return int(queue.declaration_result.message_count or 0)


def queue_depth(url: str, name: str) -> int:
    """The messages ready in queue ``name``."""
    return asyncio.run(_depth(url, name))


def processed(engine: Engine) -> list[str]:
    """The tx_ids the handler processed, one per processing (in order)."""
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT tx_id FROM processed ORDER BY ctid")).scalars())


def relayed_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id).where(t.c.relayed_at.is_not(None))).scalars())


def on_order(session: Session, message: Any) -> None:
    session.execute(text("INSERT INTO processed (tx_id, body) VALUES (:tx, :body)"),
                    {"tx": message.message_id, "body": message.body})


class Consumer:
    """Consumes ``queue`` through a :class:`RabbitMQInbox` (group ``billing``); records
    every delivery's ``message_id``, duplicates included."""

    def __init__(self, url: str, queue: str, outbox: Outbox,
                 handler: Callable[[Session, Any], None] | None = None) -> None:
        self.url, self.queue = url, queue
        self.inbox = RabbitMQInbox("billing", handler or on_order, outbox=outbox)
        self.deliveries: list[str] = []
        #: each delivery's AMQP properties the tests look at
        self.messages: list[dict[str, Any]] = []

    def run_until(self, done: Callable[[Consumer], bool], *, timeout: float = 60.0) -> None:
        """Consume until ``done(self)`` holds after a delivery; :class:`WaitTimeout` after
        ``timeout`` seconds."""
        asyncio.run(self._run(done, timeout))

    async def _run(self, done: Callable[[Consumer], bool], timeout: float) -> None:
        connection = await aio_pika.connect(self.url, timeout=10)
        async with connection:
            channel = await connection.channel()
            await channel.set_qos(prefetch_count=50)
            queue = await channel.get_queue(self.queue, ensure=False)
            arrived = asyncio.Event()

            async def on_message(message: AbstractIncomingMessage) -> None:
                self.deliveries.append(message.message_id or "")
                self.messages.append({"delivery_mode": int(message.delivery_mode or 0),
                                      "type": message.type,
                                      "headers": dict(message.headers or {})})
                await self.inbox.on_message(message)
                arrived.set()

            await queue.consume(on_message)
            deadline = time.monotonic() + timeout
            while not done(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"consumer of {self.queue}: not done after {timeout} s; "
                                      f"deliveries {len(self.deliveries)}, inbox "
                                      f"{self.inbox.counts}")
                arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), left)


class PublishingBlocked:
    """A memory alarm on the node: it stops reading from connections that publish, so
    their publishes are never confirmed (``rabbitmqctl set_vm_memory_high_watermark``).
    :meth:`apply` raises the alarm and waits until the node reports it; :meth:`lift`
    sets the default watermark back (0.4) and waits until the alarm is gone."""

    DEFAULT_WATERMARK = "0.4"

    def __init__(self, server: RabbitMQServer) -> None:
        self.server = server
        self.applied = False

    def _ctl(self, *args: str) -> str:
        done = subprocess.run([str(RABBITMQ_SERVER.with_name("rabbitmqctl")), "-n",
                               self.server.node, *args], env=self.server.env(),
                              capture_output=True, text=True, timeout=60, check=True)
        return done.stdout

    def _alarmed(self) -> bool:
        return "memory" in self._ctl("eval", "rabbit_alarm:get_alarms().")

    def apply(self) -> None:
        self.applied = True
        self._ctl("set_vm_memory_high_watermark", "0.0001")
        wait_until(self._alarmed, timeout=60, interval=0.5,
                   message="the node never raised its memory alarm")

    def lift(self) -> None:
        if not self.applied:
            return
        self._ctl("set_vm_memory_high_watermark", self.DEFAULT_WATERMARK)
        wait_until(lambda: not self._alarmed(), timeout=60, interval=0.5,
                   message="the node's memory alarm never cleared")
        self.applied = False
