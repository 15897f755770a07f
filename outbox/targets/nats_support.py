"""NATS JetStream's :class:`~outbox.targets.choose.TargetSupport`: publisher, probe, export.

Imported only for a ``nats://`` / ``tls://`` address (:mod:`outbox.targets.choose`):
it loads ``nats-py`` (the ``nats`` extra).

JetStream has no half messages, so it never asks a producer about a
transaction: :meth:`NatsSupport.serve_checkbacks` has nothing to answer and
says so in one log line.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import nats.errors
import nats.js.errors

from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError, ConfigurationError
from outbox.targets.base import Publisher
from outbox.targets.nats import NatsTarget, connect
from outbox.targets.runner import TargetPublisher

__all__ = ["SUPPORT", "NatsSupport", "probe"]

log = logging.getLogger("rocketbox.checker")


async def _probe(outbox: Outbox) -> None:
    client = await connect(outbox, name=f"{outbox.producer_group}-probe")
    try:
        await client.jetstream(timeout=outbox.relay.broker_timeout).account_info()
    except (nats.js.errors.ServiceUnavailableError, nats.js.errors.NoStreamResponseError,
            nats.errors.NoRespondersError) as exc:
        raise ConfigurationError(
            f"JetStream is not enabled on {outbox.broker_display} (start nats-server with -js; "
            f"docs/nats.md): {exc or type(exc).__name__}", setting="broker") from exc
    except nats.errors.TimeoutError as exc:
        raise BrokerUnreachableError(f"NATS at {outbox.broker_display}: no answer") from exc
    finally:
        await client.close()


def probe(outbox: Outbox) -> Exception | None:
    """Connect once and ask for the account's JetStream info.

    :class:`~outbox.errors.ConfigurationError` for refused credentials or a
    server without JetStream; an outage is returned (to retry); None when it
    answered. Each stream is checked before its first row is published
    (:mod:`outbox.targets.nats`).
    """
    try:
        asyncio.run(_probe(outbox))
    except BrokerUnreachableError as exc:
        return exc
    return None


class NatsSupport:
    """NATS JetStream servers, through ``nats-py``."""

    def publisher(self, outbox: Outbox) -> Publisher:
        return TargetPublisher(NatsTarget(outbox))

    def probe(self, outbox: Outbox, *, group: str | None = None) -> Exception | None:
        return probe(outbox)

    def serve_checkbacks(self, outbox: Outbox, stop: threading.Event,
                         on_ready: Callable[[], None] | None, *, threads: int,
                         retry_interval: float) -> None:
        """Nothing to serve: JetStream has no half messages, so no check-backs."""
        log.info("NATS JetStream (%s) has no half messages and no check-backs: nothing to "
                 "answer; waiting to be stopped", outbox.broker_display)
        if on_ready is not None:
            on_ready()
        stop.wait()

    def export_messages(self, outbox: Outbox, out: Path, *, source: str | None) -> int:
        """Write every message of stream ``source`` (None: every stream) to ``out``
        (:mod:`outbox.broker_export`); the count written."""
        from outbox.targets.nats_export import export_messages

        return export_messages(outbox, out, source=source)


SUPPORT = NatsSupport()
