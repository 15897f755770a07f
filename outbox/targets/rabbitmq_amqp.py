"""What the RabbitMQ target speaks: its settings, a row as an AMQP message, a connection.

:class:`AmqpSettings` reads the outbox (the address, its ``?exchange=``
option, the credentials, the timeout); :func:`amqp_properties` and
:func:`amqp_headers` are the mapping of a row onto AMQP that
:mod:`outbox.targets.rabbitmq`'s module doc describes (:func:`amqp_message` is
the same row for aio-pika's own ``Exchange.publish``); :func:`connect` and
:func:`probe` open a connection, telling a setup that can never work
(:class:`~outbox.errors.ConfigurationError`) from an outage
(:class:`~outbox.errors.BrokerUnreachableError`). The target, the export and
the benchmarks use these; :mod:`outbox.targets.rabbitmq` re-exports them.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote

import aio_pika
import aiormq.exceptions as amqp_errors
from aio_pika.abc import AbstractConnection, FieldValue
from aiormq import spec

from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError, ConfigurationError
from outbox.targets.base import TX_ID_PROPERTY, OutgoingMessage
from outbox.targets.resolving import no_such_host

__all__ = ["GROUP_HEADER", "KEYS_HEADER", "PERSISTENT", "POSITION", "PUBLISHED_MS_HEADER",
           "AmqpSettings", "amqp_headers", "amqp_message", "amqp_properties", "connect",
           "probe"]

#: the headers the target adds to the row's own
KEYS_HEADER = "rocketbox-keys"
GROUP_HEADER = "rocketbox-group"
PUBLISHED_MS_HEADER = "rocketbox-published-ms"
#: the position the relay writes on a row (``broker_position``): AMQP says no more
POSITION = "QUEUE"
#: AMQP's ``delivery_mode`` of a persistent message
PERSISTENT = 2
#: the address's query options the target knows
_OPTIONS = frozenset({"exchange"})


@dataclass(frozen=True, slots=True)
class AmqpSettings:
    """What the target needs from the outbox: where to connect, where to publish.

    ``url`` carries the credentials (the address's ``USER:PASS@``, else the
    outbox's ``access_key``/``secret_key``, else aio-pika's ``guest``);
    ``shown`` is the address without the password, for logs and errors.
    """

    url: str = field(repr=False)  # holds the password: never shown
    shown: str
    exchange: str
    timeout: float
    app_id: str

    @classmethod
    def of(cls, outbox: Outbox) -> AmqpSettings:
        address = outbox.target_address
        options = parse_qs(address.query, keep_blank_values=True)
        unknown = sorted(set(options) - _OPTIONS)
        if unknown:
            raise ConfigurationError(
                f"broker = {address.redacted()!r}: unknown option {unknown[0]!r}; "
                f"RabbitMQ addresses take ?exchange=NAME only", setting="broker")
        exchange = options.get("exchange", [""])[-1]
        userinfo = address.userinfo
        if not userinfo and outbox.access_key:
            userinfo = f"{quote(outbox.access_key, safe='')}:" \
                       f"{quote(outbox.secret_key or '', safe='')}"
        host, port = address.endpoints[0]
        scheme = "amqps" if address.tls else "amqp"
        url = f"{scheme}://{userinfo + '@' if userinfo else ''}{host}:{port}{address.path}"
        return cls(url, address.redacted(), exchange, outbox.relay.broker_timeout,
                   outbox.producer_group)

    @property
    def user(self) -> str:
        userinfo = self.url.partition("://")[2].rpartition("@")[0]
        return unquote(userinfo.partition(":")[0]) if userinfo else "guest"


def amqp_headers(msg: OutgoingMessage, *, published_ms: int) -> dict[str, FieldValue]:
    """The AMQP headers of one row: its own, and the target's (the mapping in the module doc)."""
    headers: dict[str, FieldValue] = {str(k): str(v) for k, v in msg.properties.items()}
    headers[TX_ID_PROPERTY] = msg.tx_id
    if msg.keys:
        headers[KEYS_HEADER] = " ".join(msg.keys)
    if msg.message_group is not None:
        headers[GROUP_HEADER] = msg.message_group
    headers[PUBLISHED_MS_HEADER] = published_ms
    return headers


def amqp_properties(msg: OutgoingMessage, *, app_id: str,
                    published_ms: int | None = None) -> spec.Basic.Properties:
    """The AMQP properties the target publishes one row with (persistent, ``message_id`` =
    ``tx_id``); ``published_ms`` (ms since the epoch) defaults to now."""
    if published_ms is None:
        published_ms = time.time_ns() // 1_000_000
    return spec.Basic.Properties(headers=amqp_headers(msg, published_ms=published_ms),
                                 message_id=msg.tx_id, message_type=msg.tag, app_id=app_id,
                                 delivery_mode=PERSISTENT)


def amqp_message(msg: OutgoingMessage, *, app_id: str) -> aio_pika.Message:
    """The same row as an aio-pika message (for aio-pika's own ``Exchange.publish``)."""
    return aio_pika.Message(msg.body, headers=amqp_headers(msg, published_ms=time.time_ns()
                                                           // 1_000_000),
                            message_id=msg.tx_id, type=msg.tag, app_id=app_id,
                            delivery_mode=aio_pika.DeliveryMode.PERSISTENT)


def _setup_error(settings: AmqpSettings, exc: BaseException) -> ConfigurationError | None:
    """The connection error as a setup that can never work, or None (an outage)."""
    if isinstance(exc, amqp_errors.AuthenticationError
                  | amqp_errors.ProbableAuthenticationError):
        return ConfigurationError(f"RabbitMQ at {settings.shown} refused the credentials of "
                                  f"user {settings.user!r}: {exc}", setting="broker")
    if isinstance(exc, amqp_errors.ConnectionNotAllowed):
        return ConfigurationError(f"RabbitMQ at {settings.shown} refused the vhost for user "
                                  f"{settings.user!r}: {exc}", setting="broker")
    resolve = no_such_host(exc)
    if resolve is not None:
        return ConfigurationError(f"broker = {settings.shown!r}: the host does not resolve "
                                  f"({resolve.strerror})", setting="broker")
    return None


async def connect(settings: AmqpSettings, *, name: str) -> AbstractConnection:
    """One connection; :class:`ConfigurationError` for a setup that can never work,
    :class:`BrokerUnreachableError` for an outage."""
    try:
        return await aio_pika.connect(settings.url, timeout=settings.timeout,
                                      client_properties={"connection_name": name})
    except Exception as exc:
        setup = _setup_error(settings, exc)
        if setup is not None:
            raise setup from exc
        raise BrokerUnreachableError(f"RabbitMQ at {settings.shown} unreachable: "
                                     f"{exc or type(exc).__name__}",
                                     server=settings.shown) from exc


def probe(outbox: Outbox) -> Exception | None:
    """Connect once and close: raise for a setup that can never work, return an outage."""
    settings = AmqpSettings.of(outbox)

    async def once() -> None:
        connection = await connect(settings, name=f"{settings.app_id}-probe")
        await connection.close()

    try:
        asyncio.run(once())
    except BrokerUnreachableError as exc:
        return exc
    return None
