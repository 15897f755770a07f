"""Who is calling: the request metadata, the ``MQv2-HMAC-SHA1`` signature, and the ACL.

The official RocketMQ 5 clients send, with every call (and once when they
open a Telemetry stream), these metadata entries::

    x-mq-client-id    the client's id (required: CLIENT_ID_REQUIRED without it)
    x-mq-date-time    e.g. 20240501T101500Z
    authorization     MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time,
                      Signature=HEX

``Signature`` is the hex HMAC-SHA1 of the ``x-mq-date-time`` value, keyed by the
secret key of ``AK`` (the clients' ``Signature.sign``; RocketMQ's
``DefaultAuthenticationContextBuilder`` reads the same fields, and takes the
access key as the part of ``Credential`` before any ``/``). A client without
credentials still sends the header, with an empty access key.

Without an ACL the door checks nothing but the client id. With one, a call
is refused with UNAUTHORIZED when the header is missing or malformed, the
access key is unknown or empty, the signature is wrong, or the date-time is
further than the allowed clock skew from the broker's clock. The official
Python client formats its *local* time with a ``Z`` suffix, so the skew is
measured against both the broker's local time and UTC and the nearer one
counts. RocketMQ itself checks no skew; there is no nonce, so a captured
header can be replayed within the skew window (use TLS in front of the door
where that matters).

An unknown access key and a wrong signature get the same answer
(:data:`~broker_lite.core.acl.BAD_CREDENTIALS`), so the door tells nobody
which keys exist.

Permissions come from :mod:`broker_lite.core.acl`; a refusal is answered with
UNAUTHORIZED, as RocketMQ answers an ``AuthorizationException``. A gRPC
producer's producer group is the topic (the proxy's convention): Pub on the
topic is what lets it end a transaction of the topic and get its check-backs.

Under an ACL a client id belongs to the account that first used it
(:class:`ClientOwners`) until it has been idle for the broker's client
expiry: a call by another account under that id is refused, so nobody can
heartbeat for, or terminate, another account's client.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from broker_lite.core.acl import BAD_CREDENTIALS, Account, Acl, Action
from broker_lite.core.log_safe import printable
from broker_lite.errors import NoPermissionError, UnauthorizedError
from broker_lite.grpc_door.status import Code, GrpcDoorError

__all__ = [
    "Authenticator",
    "Caller",
    "ClientOwners",
    "check_consume",
    "check_end",
    "check_producer",
    "check_route",
    "check_send",
    "check_topic",
    "metadata_dict",
    "sign",
]

ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME = "x-mq-date-time"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"


def sign(secret: str, date_time: str) -> str:
    """The signature a client sends for ``date_time``: hex HMAC-SHA1 keyed by ``secret``."""
    return hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def metadata_dict(metadata: Iterable[Any] | None) -> dict[str, str]:
    """gRPC invocation metadata as a dict with lower-case keys (text values only)."""
    result: dict[str, str] = {}
    for item in metadata or ():
        key, value = item[0], item[1]
        if isinstance(value, str):
            result[str(key).lower()] = value
    return result


@dataclass(frozen=True, slots=True)
class Caller:
    """The client behind one call: its id, its address and (with an ACL) its account."""

    client_id: str
    peer: str
    account: Account | None
    language: str = ""
    version: str = ""


class Authenticator:
    """Checks the metadata of a call against the ACL (or only the client id without one)."""

    def __init__(self, acl: Acl | None, *, clock_skew_seconds: float | None = None) -> None:
        self._acl = acl
        if clock_skew_seconds is not None:
            self._skew = float(clock_skew_seconds)
        else:
            self._skew = acl.clock_skew_ms / 1000 if acl is not None else 300.0

    @property
    def enabled(self) -> bool:
        return self._acl is not None

    def caller(self, metadata: Mapping[str, str], peer: str, *,
               now: datetime | None = None) -> Caller:
        """The caller of a request; raises GrpcDoorError or UnauthorizedError."""
        client_id = metadata.get("x-mq-client-id", "").strip()
        if not client_id:
            raise GrpcDoorError(Code.CLIENT_ID_REQUIRED,
                                "client id cannot be empty (metadata x-mq-client-id)")
        account = self._account(metadata, now) if self._acl is not None else None
        return Caller(client_id=client_id, peer=_peer_address(peer), account=account,
                      language=metadata.get("x-mq-language", ""),
                      version=metadata.get("x-mq-client-version", ""))

    def _account(self, metadata: Mapping[str, str], now: datetime | None) -> Account:
        assert self._acl is not None
        header = metadata.get("authorization", "").strip()
        if not header:
            raise UnauthorizedError("credentials required: the request carries no "
                                    "'authorization' metadata (MQv2-HMAC-SHA1)")
        access_key, signed, signature = _parse_authorization(header)
        if not access_key:
            raise UnauthorizedError("credentials required: the request is signed with an "
                                    "empty access key")
        if DATE_TIME not in signed:
            raise UnauthorizedError(f"SignedHeaders must include {DATE_TIME}, got "
                                    f"{','.join(signed) or 'nothing'}")
        date_time = metadata.get(DATE_TIME, "")
        if not date_time:
            raise UnauthorizedError(f"the request carries no {DATE_TIME} metadata to verify")
        account = self._acl.account(access_key)
        # an unknown key costs the same HMAC as a known one, and gets the same answer
        expected = sign(account.secret_key if account is not None else "", date_time)
        if not hmac.compare_digest(expected.encode(), signature.lower().encode()) \
                or account is None:
            raise UnauthorizedError(BAD_CREDENTIALS)
        self._check_skew(date_time, now)
        return account

    def _check_skew(self, date_time: str, now: datetime | None) -> None:
        try:
            stamp = datetime.strptime(date_time, DATE_FORMAT)
        except ValueError:
            raise UnauthorizedError(
                f"{DATE_TIME} {date_time!r} is not in the form 20240501T101500Z") from None
        if now is None:
            candidates = [datetime.now(), datetime.now(UTC).replace(tzinfo=None)]
        else:
            candidates = [now.replace(tzinfo=None)]
        drift = min(abs((stamp - c).total_seconds()) for c in candidates)
        if drift > self._skew:
            raise UnauthorizedError(
                f"{DATE_TIME} {date_time} is {drift:.0f} s away from the broker's clock "
                f"(allowed: {self._skew:g} s)")


def _parse_authorization(header: str) -> tuple[str, list[str], str]:
    algorithm, _, rest = header.partition(" ")
    if algorithm != ALGORITHM:
        raise UnauthorizedError(
            f"unsupported authorization scheme {algorithm!r} (expected {ALGORITHM})")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise UnauthorizedError(f"malformed authorization header near {part.strip()!r}")
        fields[name] = value.strip()
    access_key = fields.get("Credential", "").split("/")[0]
    signed = [h.strip().lower() for h in fields.get("SignedHeaders", "").split(";") if h.strip()]
    return access_key, signed, fields.get("Signature", "")


def _peer_address(peer: str) -> str:
    """``ipv4:127.0.0.1:5555`` / ``ipv6:[::1]:5555`` -> ``127.0.0.1:5555`` / ``[::1]:5555``."""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix):]
    return peer


# -- permissions ---------------------------------------------------------------------


def _refused(exc: NoPermissionError) -> UnauthorizedError:
    return UnauthorizedError(str(exc))


def check_topic(account: Account | None, topic: str, action: Action) -> None:
    if account is not None:
        try:
            account.check_topic(topic, action)
        except NoPermissionError as exc:
            raise _refused(exc) from None


def check_send(account: Account | None, topic: str, *, creates: bool) -> None:
    """Pub on the topic; when the send ``creates`` it, Create too (or Pub on that exact
    name)."""
    if account is not None:
        try:
            account.check_topic(topic, "Pub")
            if creates:
                account.check_auto_create(topic)
        except NoPermissionError as exc:
            raise _refused(exc) from None


def check_consume(account: Account | None, topic: str, group: str) -> None:
    if account is not None:
        try:
            account.check_consume(topic, group)
        except NoPermissionError as exc:
            raise _refused(exc) from None


def check_producer(account: Account | None, producer_group: str) -> None:
    """A gRPC producer's group is its topic: Pub on that topic."""
    check_topic(account, producer_group, "Pub")


def check_end(account: Account | None, producer_group: str, real_topic: str | None) -> None:
    """Ending a transaction: Pub on the group (the topic) and on the half's real topic."""
    check_producer(account, producer_group)
    if real_topic is not None and real_topic != producer_group:
        check_topic(account, real_topic, "Pub")


def may_check(account: Account | None, producer_group: str, topic: str) -> bool:
    """Whether a gRPC producer may get a check-back of ``producer_group``'s half of ``topic``."""
    if account is None:
        return True
    try:
        account.check_topic(producer_group, "Pub")
        account.check_topic(topic, "Pub")
    except NoPermissionError:
        return False
    return True


def check_route(account: Account | None, topic: str) -> None:
    """A route is for whoever may publish to, subscribe to, or Get the topic."""
    if account is None or account.admin:
        return
    try:
        account.check_topic(topic, "Pub")
        return
    except NoPermissionError:
        pass
    try:
        account.check_topic(topic, "Sub")
    except NoPermissionError as exc:
        if not account.allows("Topic", topic, "Get"):
            raise _refused(exc) from None


class ClientOwners:
    """Which account each client id belongs to (under an ACL), until idle for ``expiry``."""

    def __init__(self, expiry_seconds: float) -> None:
        self._expiry = expiry_seconds
        self._lock = threading.Lock()
        self._owners: dict[str, tuple[str, float]] = {}

    def claim(self, client_id: str, access_key: str) -> None:
        """Note a call by ``access_key`` as ``client_id``; UnauthorizedError if the id is
        another account's."""
        now = time.monotonic()
        with self._lock:
            owner = self._owners.get(client_id)
            if owner is not None and owner[0] != access_key and now - owner[1] < self._expiry:
                raise UnauthorizedError(
                    f"client id {printable(client_id)!r} belongs to another account; "
                    "pick a client id of your own")
            self._owners[client_id] = (access_key, now)

    def prune(self) -> None:
        cutoff = time.monotonic() - self._expiry
        with self._lock:
            for client_id in [c for c, (_k, seen) in self._owners.items() if seen < cutoff]:
                del self._owners[client_id]
