"""broker_lite's :class:`~outbox.targets.choose.TargetSupport`: publisher, probe, check-backs.

:func:`probe` tells a setup that can never work from an outage
(:mod:`outbox.broker_health` explains the split): a host name that does not
resolve, refused credentials and an account the ACL refuses the producer
group raise :class:`~outbox.errors.ConfigurationError` naming the setting; a
refused or timed-out connection is returned, to be retried.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker_lite.client import Producer
from broker_lite.errors import BrokerError, NoPermissionError, UnauthorizedError
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.targets import broker_lite_checkback
from outbox.targets.base import Publisher
from outbox.targets.broker_lite import BrokerLitePublisher
from outbox.targets.resolving import no_such_host

__all__ = ["SUPPORT", "BrokerLiteSupport", "probe"]

#: getaddrinfo answers that say the name does not exist (not "try again")


def probe(outbox: Outbox, *, group: str | None = None) -> Exception | None:
    """Connect to broker_lite once as ``group`` (default: the relay's,
    ``<producer_group>-relay``); raise for a configuration error, return a transient one."""
    producer = Producer(group or outbox.producer_group + "-relay", outbox.broker,
                        access_key=outbox.access_key, secret_key=outbox.secret_key,
                        timeout=outbox.relay.broker_timeout)
    try:
        producer.start()
        producer.shutdown()
    except UnauthorizedError as exc:
        keys = ("--access-key/--secret-key" if outbox.access_key or outbox.secret_key
                else "no --access-key/--secret-key given")
        raise ConfigurationError(
            f"broker {outbox.broker_display} refused the credentials ({keys}): {exc}",
            setting="access_key, secret_key") from None
    except NoPermissionError as exc:
        raise ConfigurationError(
            f"broker {outbox.broker_display} refused the account for producer group "
            f"{outbox.producer_group!r} (--access-key, --group; the broker's ACL): {exc}",
            setting="producer_group",
        ) from None
    except BrokerError as exc:
        resolve = no_such_host(exc)
        if resolve is not None:
            host = outbox.broker.rpartition(":")[0]
            raise ConfigurationError(
                f"--broker {outbox.broker_display}: host {host!r} does not resolve "
                f"({resolve.strerror})", setting="broker") from None
        return exc
    return None


class BrokerLiteSupport:
    """broker_lite's native door."""

    def publisher(self, outbox: Outbox) -> Publisher:
        return BrokerLitePublisher(outbox)

    def probe(self, outbox: Outbox, *, group: str | None = None) -> Exception | None:
        return probe(outbox, group=group)

    def serve_checkbacks(self, outbox: Outbox, stop: threading.Event,
                         on_ready: Callable[[], None] | None, *, threads: int,
                         retry_interval: float) -> None:
        broker_lite_checkback.serve(outbox, stop, on_ready, threads=threads,
                                    retry_interval=retry_interval)


SUPPORT = BrokerLiteSupport()
