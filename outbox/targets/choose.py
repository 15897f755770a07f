"""The publisher for an outbox's broker address: broker_lite's or RocketMQ 5's.

``Outbox.broker``'s scheme (:mod:`outbox.targets.address`) picks the target;
everything that relays (the Celery app, Django, Flask, the CLI) asks here, so
moving to Apache RocketMQ is a change of that one setting.
"""

from __future__ import annotations

from broker_lite.extras import missing_extra, needs_extra
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.targets.base import Publisher
from outbox.targets.broker_lite import BrokerLitePublisher

__all__ = ["publisher_for"]


def publisher_for(outbox: Outbox) -> Publisher:
    """The sync publisher the relay uses for ``outbox.broker``.

    On RocketMQ the relay's producer answers the check-backs the proxy routes
    to it from the status table, as ``rocketbox checker`` does.
    """
    if outbox.target_address.is_rocketmq:
        # the official RocketMQ client (grpc, its OpenTelemetry exporters) is loaded only
        # for a rocketmq:// address, as SQLAlchemy loads a dialect for its URL's scheme
        if missing_extra("rocketmq"):
            raise ConfigurationError(needs_extra("the RocketMQ target", "rocketmq"),
                                     setting="broker")
        from outbox.targets.rocketmq import RocketMQTarget
        from outbox.targets.rocketmq_checkback import StatusTableChecker
        from outbox.targets.runner import TargetPublisher
        return TargetPublisher(RocketMQTarget(outbox, checker=StatusTableChecker(outbox)))
    return BrokerLitePublisher(outbox)
