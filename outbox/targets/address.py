"""The broker address: one setting that says which kind of broker the outbox publishes to.

========================================  ==========================================
``HOST:PORT``                             broker_lite's native door (the default)
``broker-lite://HOST:PORT``               the same, spelled out
``rocketmq://HOST:PORT[,HOST:PORT...]``   Apache RocketMQ 5 proxy endpoints (gRPC)
``rocketmqs://HOST:PORT[,...]``           the same over TLS
========================================  ==========================================

:func:`parse_broker_address` is the one parser: ``Outbox(broker=...)``, Django's
``ROCKETBOX['BROKER']``, Flask's ``ROCKETBOX_BROKER`` and ``rocketbox ... --broker``
all go through it. A bad address raises :class:`BrokerAddressError`, a
:class:`~outbox.errors.ConfigurationError` and a :class:`ValueError`, naming
the setting it came from. The access key / secret key are separate settings,
passed through to either target unchanged (MQv2-HMAC-SHA1 on RocketMQ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from outbox.errors import ConfigurationError

__all__ = ["BROKER_LITE", "ROCKETMQ", "BrokerAddress", "BrokerAddressError",
           "parse_broker_address"]

Kind = Literal["broker-lite", "rocketmq"]

BROKER_LITE: Kind = "broker-lite"
ROCKETMQ: Kind = "rocketmq"

_SCHEMES: dict[str, tuple[Kind, bool]] = {
    "broker-lite": (BROKER_LITE, False),
    "rocketmq": (ROCKETMQ, False),
    "rocketmqs": (ROCKETMQ, True),
}


class BrokerAddressError(ConfigurationError, ValueError):
    """A broker address that cannot be parsed; ``setting`` names where it came from."""

    def __init__(self, setting: str, value: str, problem: str) -> None:
        super().__init__(
            f"{setting} = {value!r}: {problem}; expected HOST:PORT (broker_lite), "
            "broker-lite://HOST:PORT or rocketmq://HOST:PORT[,HOST:PORT...] "
            "(RocketMQ 5 proxies; rocketmqs:// for TLS)", setting=setting)
        self.value = value


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """A parsed broker address: its kind, its endpoints, whether TLS is on."""

    kind: Kind
    endpoints: tuple[tuple[str, int], ...]
    tls: bool = False

    @property
    def is_rocketmq(self) -> bool:
        return self.kind == ROCKETMQ

    @property
    def native(self) -> str:
        """broker_lite's ``HOST:PORT`` (the first endpoint's)."""
        host, port = self.endpoints[0]
        return f"{host}:{port}"

    def endpoint_strings(self) -> list[str]:
        """``HOST:PORT`` of each endpoint, in the order given."""
        return [f"{host}:{port}" for host, port in self.endpoints]

    def __str__(self) -> str:
        if self.kind == BROKER_LITE:
            return self.native
        scheme = "rocketmqs" if self.tls else "rocketmq"
        return f"{scheme}://" + ",".join(self.endpoint_strings())


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
        scheme, rest = BROKER_LITE, text
    if scheme not in _SCHEMES:
        raise BrokerAddressError(setting, value, f"unknown scheme {scheme!r}")
    kind, tls = _SCHEMES[scheme]
    parts = [p for p in rest.rstrip("/").split(",")]
    if any(not p.strip() for p in parts):
        raise BrokerAddressError(setting, value, "an endpoint is empty")
    endpoints = tuple(_endpoint(setting, value, p) for p in parts)
    if kind == BROKER_LITE and len(endpoints) > 1:
        raise BrokerAddressError(setting, value, "broker_lite takes exactly one HOST:PORT")
    if len(set(endpoints)) != len(endpoints):
        raise BrokerAddressError(setting, value, "an endpoint is listed twice")
    return BrokerAddress(kind, endpoints, tls)
