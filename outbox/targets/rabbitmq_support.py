"""RabbitMQ's :class:`~outbox.targets.choose.TargetSupport`: publisher, probe, (no) check-backs.

Imported only for an ``amqp://`` / ``amqps://`` address
(:mod:`outbox.targets.choose`): it loads aio-pika.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from outbox.config import Outbox
from outbox.targets import rabbitmq
from outbox.targets.base import Publisher
from outbox.targets.runner import TargetPublisher

__all__ = ["SUPPORT", "RabbitMQSupport"]

log = logging.getLogger("rocketbox.checker")


class RabbitMQSupport:
    """RabbitMQ through aio-pika: publisher confirms, no halves, no check-backs."""

    def publisher(self, outbox: Outbox) -> Publisher:
        return TargetPublisher(rabbitmq.RabbitMQTarget(outbox))

    def probe(self, outbox: Outbox, *, group: str | None = None) -> Exception | None:
        """One connection (RabbitMQ has no producer group to connect as)."""
        return rabbitmq.probe(outbox)

    def serve_checkbacks(self, outbox: Outbox, stop: threading.Event,
                         on_ready: Callable[[], None] | None, *, threads: int,
                         retry_interval: float) -> None:
        """RabbitMQ never asks: there is no half to check back on. Says so, waits for stop."""
        log.info("RabbitMQ (%s) has no transactional half and no check-back: nothing to "
                 "answer; the relay publishes committed rows only",
                 outbox.target_address.redacted())
        if on_ready is not None:
            on_ready()
        stop.wait()

    def export_messages(self, outbox: Outbox, out: Path, *, source: str | None = None) -> int:
        """Write what the stream(s) hold to ``out`` (:mod:`outbox.targets.rabbitmq_export`)."""
        from outbox.targets.rabbitmq_export import export_messages
        return export_messages(outbox, out, source=source)


SUPPORT = RabbitMQSupport()
