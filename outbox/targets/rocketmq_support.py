"""RocketMQ 5's :class:`~outbox.targets.choose.TargetSupport`: publisher, probe, check-backs.

Imported only for a ``rocketmq://`` / ``rocketmqs://`` address
(:mod:`outbox.targets.choose`): it loads the official client.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from outbox.config import Outbox
from outbox.targets import rocketmq
from outbox.targets.base import Publisher
from outbox.targets.rocketmq_checkback import StatusTableChecker
from outbox.targets.rocketmq_responder import RocketMQResponder
from outbox.targets.runner import TargetPublisher

__all__ = ["SUPPORT", "RocketMQSupport"]

log = logging.getLogger("rocketbox.checker")


class RocketMQSupport:
    """Apache RocketMQ 5 proxies, through the official client."""

    def publisher(self, outbox: Outbox) -> Publisher:
        """The relay's producer answers the check-backs the proxy routes to it."""
        return TargetPublisher(rocketmq.RocketMQTarget(outbox,
                                                       checker=StatusTableChecker(outbox)))

    def probe(self, outbox: Outbox, *, group: str | None = None) -> Exception | None:
        """Each proxy once (a RocketMQ 5 producer has no group to connect as)."""
        return rocketmq.probe(outbox)

    def serve_checkbacks(self, outbox: Outbox, stop: threading.Event,
                         on_ready: Callable[[], None] | None, *, threads: int,
                         retry_interval: float) -> None:
        """A :class:`RocketMQResponder` (it retries an unreachable proxy at each refresh)."""
        responder = RocketMQResponder(outbox)
        responder.refresh()
        if on_ready is not None:
            on_ready()
        responder.serve(stop)
        log.info("check-back responder stopped (answered: %s)", responder.checks_answered)


SUPPORT = RocketMQSupport()
