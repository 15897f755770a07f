"""The broker address: one setting that says which kind of broker the outbox publishes to.

========================================  ==========================================
``HOST:PORT``                             broker_lite's native door (the default)
``broker-lite://HOST:PORT``               the same, spelled out
``rocketmq://HOST:PORT[,HOST:PORT...]``   Apache RocketMQ 5 proxy endpoints (gRPC)
``rocketmqs://HOST:PORT[,...]``           the same over TLS
``nats://[USER:PASS@]HOST:PORT[,...]``   NATS JetStream servers (docs/nats.md)
``tls://HOST:PORT[,...]``                 the same over TLS
``amqp://[USER:PASS@]HOST:PORT[/VHOST]``  RabbitMQ (AMQP 0-9-1; ``?exchange=NAME``)
``amqps://...``                           the same over TLS
========================================  ==========================================

:func:`parse_broker_address` is the one parser: ``Outbox(broker=...)``, Django's
``ROCKETBOX['BROKER']``, Flask's ``ROCKETBOX_BROKER`` and ``rocketbox ... --broker``
all go through it. A bad address raises :class:`BrokerAddressError`, a
:class:`~outbox.errors.ConfigurationError` and a :class:`ValueError`, naming
the setting it came from. The access key / secret key are separate settings,
passed through to either target unchanged (MQv2-HMAC-SHA1 on RocketMQ).

A password written in the address (``amqp://user:PASS@host``, ``nats://user:PASS@host``)
is only used to connect: everything that prints, logs, stores for display or raises
shows :func:`redacted_address` (``amqp://user:***@host``) instead.

Each kind has :class:`KindTraits` in :data:`KINDS`: its schemes, and the facts
the outbox may need before any broker client is loaded (the modes it
supports, whether it has broker_lite's native door, which module holds its
:class:`~outbox.targets.choose.TargetSupport`).
A new kind of broker is a new entry here and its modules under
``outbox/targets/``; nothing outside this package asks which kind it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from outbox.errors import ConfigurationError

__all__ = ["BROKER_LITE", "DEFAULT_KIND", "KINDS", "NATS", "RABBITMQ", "ROCKETMQ",
           "BrokerAddress", "BrokerAddressError", "KindTraits", "parse_broker_address",
           "redacted_address"]

Kind = Literal["broker-lite", "rocketmq", "nats", "rabbitmq"]

BROKER_LITE: Kind = "broker-lite"
ROCKETMQ: Kind = "rocketmq"
NATS: Kind = "nats"
RABBITMQ: Kind = "rabbitmq"

@dataclass(frozen=True, slots=True)
class KindTraits:
    """What the outbox knows of a kind of broker without loading its client."""

    #: names the kind in errors (``RocketMQ``)
    title: str
    #: the address's scheme, and the one for TLS (None: the kind has no TLS scheme)
    scheme: str
    tls_scheme: str | None
    #: how the address is written, for the error of a bad one
    form: str
    #: the module whose ``SUPPORT`` is the kind's :class:`~outbox.targets.choose.TargetSupport`
    #: (imported on first use: its client may be heavy, as SQLAlchemy loads a dialect)
    support_module: str
    #: the ``Outbox.mode`` values it supports
    modes: frozenset[str]
    #: the doc page an error points to
    doc: str
    #: the kind takes exactly one endpoint
    one_endpoint: bool = False
    #: what a broker_lite-native consumer (``InboxConsumer``) should use instead, or None
    #: when the kind is served by broker_lite's native door (then the address is written
    #: as a bare ``HOST:PORT``, the default kind's)
    consumer_hint: str | None = None
    #: the rocketbox extra that installs its client (None: a plain install has it)
    extra: str | None = None
    #: the address is a URL: ``USER:PASS@`` before its endpoint, and a ``/PATH`` and
    #: ``?QUERY`` after it, are kept (RabbitMQ's credentials, vhost and options)
    url: bool = False
    #: the address may carry ``USER:PASS@`` before its endpoints (a URL kind always may)
    userinfo: bool = False


#: the kinds of broker, keyed by kind, the default first; a new target adds its entry
#: here (and its name to :data:`Kind`)
KINDS: dict[Kind, KindTraits] = {
    BROKER_LITE: KindTraits(
        "broker_lite", "broker-lite", None,
        "HOST:PORT (broker_lite), broker-lite://HOST:PORT",
        "outbox.targets.broker_lite_support", frozenset({"outbox", "half_first"}),
        "docs/targets.md", one_endpoint=True),
    ROCKETMQ: KindTraits(
        "RocketMQ", "rocketmq", "rocketmqs",
        "rocketmq://HOST:PORT[,HOST:PORT...] (RocketMQ 5 proxies; rocketmqs:// for TLS)",
        "outbox.targets.rocketmq_support", frozenset({"outbox"}), "docs/rocketmq.md",
        consumer_hint="use outbox.inbox_rocketmq.RocketMQInbox with the official client's "
                      "SimpleConsumer",
        extra="rocketmq"),
    NATS: KindTraits(
        "NATS JetStream", "nats", "tls",
        "nats://HOST:PORT[,HOST:PORT...] (NATS JetStream servers; USER:PASS@ may precede "
        "the endpoints; tls:// for TLS)",
        "outbox.targets.nats_support", frozenset({"outbox"}), "docs/nats.md",
        consumer_hint="use outbox.inbox_nats.NatsInbox with a nats-py JetStream subscription",
        extra="nats", userinfo=True),
    RABBITMQ: KindTraits(
        "RabbitMQ", "amqp", "amqps",
        "amqp://[USER:PASS@]HOST:PORT[/VHOST][?exchange=NAME] (RabbitMQ; amqps:// for TLS)",
        "outbox.targets.rabbitmq_support", frozenset({"outbox"}), "docs/rabbitmq.md",
        one_endpoint=True,
        consumer_hint="use outbox.inbox_rabbitmq.RabbitMQInbox with an aio-pika consumer",
        extra="rabbitmq", url=True),
}
#: the default kind: a bare ``HOST:PORT``
DEFAULT_KIND: Kind = BROKER_LITE

_SCHEMES: dict[str, tuple[Kind, bool]] = {
    scheme: (kind, tls)
    for kind, traits in KINDS.items()
    for scheme, tls in ((traits.scheme, False), (traits.tls_scheme, True)) if scheme
}


class BrokerAddressError(ConfigurationError, ValueError):
    """A broker address that cannot be parsed; ``setting`` names where it came from."""

    def __init__(self, setting: str, value: str, problem: str) -> None:
        forms = " or ".join(traits.form for traits in KINDS.values())
        shown = redacted_address(value)
        super().__init__(f"{setting} = {shown!r}: {problem}; expected {forms}",
                         setting=setting)
        #: the address as written, its password redacted
        self.value = shown


def redacted_address(value: str) -> str:
    """``value`` (a broker address, parsed or not) with its password shown as ``***``:
    ``amqp://user:***@host:5672/vh``. The one place an address is made fit to print, log,
    store for display or put in an error; the password itself is only used to connect."""
    scheme, sep, rest = value.partition("://")
    head, question, query = rest.partition("?") if sep else value.partition("?")
    userinfo, at, endpoints = head.rpartition("@")
    if not at or ":" not in userinfo:
        return value
    user = userinfo.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{endpoints}{question}{query}"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """A parsed broker address: its kind, its endpoints, whether TLS is on."""

    kind: Kind
    endpoints: tuple[tuple[str, int], ...]
    tls: bool = False
    #: a URL kind's ``USER:PASS`` (as written, percent-encoded), ``/PATH`` and ``QUERY``
    userinfo: str = ""
    path: str = ""
    query: str = ""

    @property
    def is_rocketmq(self) -> bool:
        """Kept for callers outside the library; the library asks :attr:`traits`."""
        return self.kind == ROCKETMQ

    @property
    def traits(self) -> KindTraits:
        return KINDS[self.kind]

    def check_mode(self, mode: str) -> None:
        """Raise :class:`~outbox.errors.ConfigurationError` (``mode``) for a known mode
        this kind of broker does not support (an unknown mode is the caller's to refuse)."""
        traits = self.traits
        if mode in ("outbox", "half_first") and mode not in traits.modes:
            supported = ", ".join(repr(m) for m in sorted(traits.modes))
            raise ConfigurationError(
                f"mode {mode!r} is not supported on {traits.title} ({self.redacted()}): use mode "
                f"{supported} ({traits.doc})", setting="mode")

    def native_door(self, user: str) -> str:
        """broker_lite's ``HOST:PORT`` for ``user`` (a class that speaks only the native door);
        :class:`~outbox.errors.ConfigurationError` naming the broker for another kind."""
        hint = self.traits.consumer_hint
        if hint is not None:
            raise ConfigurationError(
                f"{user} consumes from broker_lite's native door; outbox.broker is "
                f"{self.redacted()}: "
                f"{hint}, or pass server=HOST:PORT", setting="broker")
        return self.native

    @property
    def native(self) -> str:
        """broker_lite's ``HOST:PORT`` (the first endpoint's)."""
        host, port = self.endpoints[0]
        return f"{host}:{port}"

    def endpoint_strings(self) -> list[str]:
        """``HOST:PORT`` of each endpoint, in the order given."""
        return [f"{host}:{port}" for host, port in self.endpoints]

    def __str__(self) -> str:
        if self.kind == DEFAULT_KIND:
            return self.native
        traits = self.traits
        scheme = traits.tls_scheme if self.tls and traits.tls_scheme else traits.scheme
        return f"{scheme}://{self.userinfo + '@' if self.userinfo else ''}" + ",".join(
            self.endpoint_strings()) + self.path + (f"?{self.query}" if self.query else "")

    def redacted(self) -> str:
        """:meth:`__str__` without the password (:func:`redacted_address`), for output,
        logs, errors and what is stored for display; ``str()`` is for connecting only."""
        return redacted_address(str(self))

    def __repr__(self) -> str:
        return f"BrokerAddress({self.redacted()!r})"


def _endpoint(setting: str, value: str, text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 literal
    if not sep or not host:
        raise BrokerAddressError(setting, value, f"endpoint {text!r} has no HOST:PORT")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise BrokerAddressError(setting, value, f"endpoint {text!r} has no port in 1..65535")
    return host, int(port)


def parse_broker_address(value: object, *, setting: str = "broker") -> BrokerAddress:
    """Parse ``value``; ``setting`` names it in errors (``--broker``, ``ROCKETBOX_BROKER``)."""
    if not isinstance(value, str) or not value.strip():
        raise BrokerAddressError(setting, str(value), "it is empty")
    text = value.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = KINDS[DEFAULT_KIND].scheme, text
    if scheme not in _SCHEMES:
        raise BrokerAddressError(setting, value, f"unknown scheme {scheme!r}")
    kind, tls = _SCHEMES[scheme]
    if KINDS[kind].url:
        return _url_address(setting, value, kind, tls, rest)
    userinfo, at, rest = rest.rpartition("@")
    if at and not KINDS[kind].userinfo:
        raise BrokerAddressError(setting, value, f"{KINDS[kind].title} takes no USER:PASS@ "
                                 "in the address (use access_key/secret_key)")
    if at and not userinfo:
        raise BrokerAddressError(setting, value, "the user before '@' is empty")
    parts = [p for p in rest.rstrip("/").split(",")]
    if any(not p.strip() for p in parts):
        raise BrokerAddressError(setting, value, "an endpoint is empty")
    endpoints = tuple(_endpoint(setting, value, p) for p in parts)
    if KINDS[kind].one_endpoint and len(endpoints) > 1:
        raise BrokerAddressError(setting, value,
                                 f"{KINDS[kind].title} takes exactly one HOST:PORT")
    if len(set(endpoints)) != len(endpoints):
        raise BrokerAddressError(setting, value, "an endpoint is listed twice")
    return BrokerAddress(kind, endpoints, tls, userinfo=userinfo)


def _url_address(setting: str, value: str, kind: Kind, tls: bool, rest: str) -> BrokerAddress:
    """A URL kind's address: ``[USER[:PASS]@]HOST:PORT[/PATH][?QUERY]``, one endpoint."""
    rest, _, query = rest.partition("?")
    userinfo, at, hostport = rest.rpartition("@")
    if at and not userinfo:
        raise BrokerAddressError(setting, value, "the user before '@' is empty")
    hostport, slash, path = hostport.partition("/")
    if "," in hostport:
        raise BrokerAddressError(setting, value,
                                 f"{KINDS[kind].title} takes exactly one HOST:PORT")
    if not hostport.strip():
        raise BrokerAddressError(setting, value, "an endpoint is empty")
    endpoint = _endpoint(setting, value, hostport)
    return BrokerAddress(kind, (endpoint,), tls, userinfo=userinfo,
                         path=f"/{path}" if slash and path else "", query=query)
