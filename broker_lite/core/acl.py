"""Access control: who may connect, publish to a topic, or consume in a group.

Pure logic, no sockets: the native door (:mod:`broker_lite.server`) and the
future gRPC door both authenticate and authorise through this module.

The ACL file is JSON::

    {
      "accounts": [
        {
          "access_key": "ak",                    # required, unique
          "secret_key": "sk",                    # required, non-empty
          "admin": false,                        # may create topics, query any key
          "topic_perms": {"Orders": "PUB|SUB", "Audit": "SUB"},
          "group_perms": {"inventory": "SUB"},
          "default_topic_perm": "DENY",          # topics not listed (default DENY)
          "default_group_perm": "SUB"            # groups not listed (default SUB)
        }
      ],
      "clock_skew_seconds": 300                  # accepted HELLO timestamp drift
    }

A permission is ``"DENY"``, ``"PUB"``, ``"SUB"`` or ``"PUB|SUB"`` (the same as
``"SUB|PUB"``), as in RocketMQ's plain ACL. Unknown keys are refused, so a typo
never silently widens or narrows access.

Rules:

- **Authentication.** A client proves it holds the secret of ``access_key``
  by signing its HELLO: ``signature`` is hex HMAC-SHA256, keyed by the secret,
  over ``f"{client_id}\\n{timestamp_ms}\\n{nonce}"`` (the formula is the native protocol's:
  :mod:`broker_lite.protocol.signing`; the door passes a verifier in).
  The timestamp must be within ``clock_skew_seconds`` of the broker's clock and
  a nonce is accepted once per access key while its timestamp is still valid
  (no replay).
- **Topics.** ``PUB`` lets an account send to a topic, ``SUB`` lets it pull
  from it. Retry and dead-letter topics (``%RETRY%G``, ``%DLQ%G``) belong to
  their consumer group ``G``: they are governed by the group's permission.
- **Groups.** A consumer group needs ``SUB`` (or ``PUB|SUB``).
- **Producer groups and transactions.** Ending a transaction, answering a
  check-back and registering a producer group are allowed for any account that
  may publish to at least one topic (``PUB`` listed, or a default of ``PUB``);
  the half message itself was already authorised when it was sent.
- **Admin.** ``admin`` accounts may create topics and query messages by key
  across all topics; topic and group permissions still apply to them for
  sending and consuming, as in RocketMQ.

Errors: :class:`AclFileError` (a ``ValueError``) for a malformed file, naming
the field; :class:`~broker_lite.errors.UnauthorizedError` for bad credentials;
:class:`~broker_lite.errors.NoPermissionError` for a refused operation.
"""

from __future__ import annotations

import heapq
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntFlag
from pathlib import Path
from typing import Any, Literal

from broker_lite.errors import ConfigurationError, NoPermissionError, UnauthorizedError

__all__ = [
    "DLQ_PREFIX",
    "RETRY_PREFIX",
    "Account",
    "Acl",
    "AclFileError",
    "Perm",
    "parse_perm",
]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
DEFAULT_CLOCK_SKEW_SECONDS = 300.0

Action = Literal["PUB", "SUB"]


class AclFileError(ConfigurationError):
    """The ACL file is missing, not JSON, or has a malformed field (named in the message).

    ``path`` is the file when known (it is in the message then).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message, setting="acl")
        self.path = path


class Perm(IntFlag):
    """Permission bits of a topic or group."""

    DENY = 0
    PUB = 1
    SUB = 2

    @property
    def label(self) -> str:
        if self == Perm.DENY:
            return "DENY"
        return "|".join(p.name or "" for p in (Perm.PUB, Perm.SUB) if p in self)


def parse_perm(text: str, *, where: str = "permission") -> Perm:
    """``"PUB|SUB"`` -> ``Perm.PUB | Perm.SUB``; raises :class:`AclFileError` naming ``where``."""
    if not isinstance(text, str):
        raise AclFileError(f"{where}: expected a string such as 'PUB|SUB', got {text!r}")
    parts = [p.strip().upper() for p in text.split("|")]
    if parts == ["DENY"]:
        return Perm.DENY
    perm = Perm.DENY
    for part in parts:
        if part not in ("PUB", "SUB"):
            raise AclFileError(
                f"{where}: {text!r} is not one of 'DENY', 'PUB', 'SUB', 'PUB|SUB'")
        perm |= Perm[part]
    return perm


def group_of_system_topic(topic: str) -> str | None:
    """``"%RETRY%G"`` or ``"%DLQ%G"`` -> ``"G"``; any other topic -> ``None``."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    """One access key and what it may do."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    topic_perms: Mapping[str, Perm] = field(default_factory=dict)
    group_perms: Mapping[str, Perm] = field(default_factory=dict)
    default_topic_perm: Perm = Perm.DENY
    default_group_perm: Perm = Perm.SUB

    def topic_perm(self, topic: str) -> Perm:
        return self.topic_perms.get(topic, self.default_topic_perm)

    def group_perm(self, group: str) -> Perm:
        return self.group_perms.get(group, self.default_group_perm)

    def check_topic(self, topic: str, action: Action) -> None:
        """Raise :class:`NoPermissionError` unless ``action`` is allowed on ``topic``.

        A retry or dead-letter topic is checked as its consumer group.
        """
        group = group_of_system_topic(topic)
        if group is not None:
            self.check_group(group)
            return
        if Perm[action] not in self.topic_perm(topic):
            raise NoPermissionError(
                f"access key {self.access_key!r} has no {action} permission on topic "
                f"{topic!r} (it has {self.topic_perm(topic).label})")

    def check_group(self, group: str) -> None:
        """Raise :class:`NoPermissionError` unless the account may consume in ``group``."""
        if Perm.SUB not in self.group_perm(group):
            raise NoPermissionError(
                f"access key {self.access_key!r} has no SUB permission on consumer group "
                f"{group!r} (it has {self.group_perm(group).label})")

    def can_publish(self) -> bool:
        """True if the account may publish to at least one topic."""
        return Perm.PUB in self.default_topic_perm or any(
            Perm.PUB in p for p in self.topic_perms.values())

    def check_producer(self, producer_group: str) -> None:
        """Producer groups (transactions, check-back): any account that can publish somewhere."""
        if not self.can_publish():
            raise NoPermissionError(
                f"access key {self.access_key!r} may not publish to any topic, so it may not "
                f"act for producer group {producer_group!r}")

    def check_admin(self, operation: str) -> None:
        if not self.admin:
            raise NoPermissionError(
                f"{operation} needs an admin account; access key {self.access_key!r} is not one")


class Acl:
    """The accounts of an ACL file, and the nonce memory that stops replays.

    Thread-safe: both doors may authenticate concurrently.
    """

    def __init__(self, accounts: list[Account], *,
                 clock_skew_seconds: float = DEFAULT_CLOCK_SKEW_SECONDS) -> None:
        if clock_skew_seconds <= 0:
            raise AclFileError(f"clock_skew_seconds must be positive, got {clock_skew_seconds}")
        self._accounts: dict[str, Account] = {}
        for account in accounts:
            if account.access_key in self._accounts:
                raise AclFileError(f"access_key {account.access_key!r} is listed twice")
            self._accounts[account.access_key] = account
        self.clock_skew_ms = int(clock_skew_seconds * 1000)
        self._lock = threading.Lock()
        # (access_key, nonce) -> expiry; the heap orders expiries for pruning
        self._seen: set[tuple[str, str]] = set()
        self._expiries: list[tuple[int, tuple[str, str]]] = []

    @property
    def accounts(self) -> list[Account]:
        return list(self._accounts.values())

    @classmethod
    def load(cls, path: str | Path) -> Acl:
        """Read an ACL file; :class:`AclFileError` names the file and the bad field."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise AclFileError(f"cannot read ACL file {path}: {exc.strerror or exc}",
                               path=str(path)) from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise AclFileError(f"ACL file {path} is not valid JSON: {exc}",
                               path=str(path)) from exc
        try:
            return cls.from_dict(data)
        except AclFileError as exc:
            raise AclFileError(f"ACL file {path}: {exc}", path=str(path)) from None

    @classmethod
    def from_dict(cls, data: Any) -> Acl:
        """Build from the parsed JSON document (see the module docstring)."""
        if not isinstance(data, dict):
            raise AclFileError("the top level must be an object with an 'accounts' list")
        _no_unknown_keys(data, {"accounts", "clock_skew_seconds"}, "top level")
        raw_accounts = data.get("accounts")
        if not isinstance(raw_accounts, list):
            raise AclFileError("'accounts' must be a list of account objects")
        skew = data.get("clock_skew_seconds", DEFAULT_CLOCK_SKEW_SECONDS)
        if isinstance(skew, bool) or not isinstance(skew, int | float) or skew <= 0:
            raise AclFileError(f"clock_skew_seconds must be a positive number, got {skew!r}")
        accounts = [_parse_account(raw, f"accounts[{i}]") for i, raw in enumerate(raw_accounts)]
        return cls(accounts, clock_skew_seconds=float(skew))

    def secret_for(self, access_key: str) -> str | None:
        """The secret of ``access_key`` (the gRPC door verifies MQv2-HMAC-SHA1 with it)."""
        account = self._accounts.get(access_key)
        return account.secret_key if account is not None else None

    def account(self, access_key: str) -> Account | None:
        return self._accounts.get(access_key)

    def authenticate(self, access_key: str, timestamp_ms: int, nonce: str, now_ms: int, *,
                     signed_by: Callable[[str], bool]) -> Account:
        """Check a signed HELLO and return its account.

        ``signed_by(secret)`` says whether the request was signed with that
        secret key; the door that received it knows its signature formula.
        Raises :class:`UnauthorizedError` for an unknown or missing key, a bad
        signature, a timestamp outside the allowed clock skew, or a nonce seen
        before. The messages never reveal the expected signature.
        """
        if not access_key:
            raise UnauthorizedError("credentials required: HELLO carries no access_key")
        account = self._accounts.get(access_key)
        if account is None:
            raise UnauthorizedError(f"unknown access key {access_key!r}")
        if not nonce:
            raise UnauthorizedError("HELLO carries no nonce")
        if not signed_by(account.secret_key):
            raise UnauthorizedError(f"bad signature for access key {access_key!r}")
        if abs(now_ms - timestamp_ms) > self.clock_skew_ms:
            raise UnauthorizedError(
                f"HELLO timestamp {timestamp_ms} is {abs(now_ms - timestamp_ms)} ms away from "
                f"the broker's clock (allowed: {self.clock_skew_ms} ms)")
        key = (access_key, nonce)
        with self._lock:
            self._prune(now_ms)
            if key in self._seen:
                raise UnauthorizedError(f"nonce {nonce!r} was already used (replayed HELLO)")
            self._seen.add(key)
            heapq.heappush(self._expiries, (timestamp_ms + self.clock_skew_ms, key))
        return account

    def _prune(self, now_ms: int) -> None:
        """Forget nonces whose timestamps could no longer pass the skew check."""
        while self._expiries and self._expiries[0][0] < now_ms:
            _, key = heapq.heappop(self._expiries)
            self._seen.discard(key)


_ACCOUNT_KEYS = {"access_key", "secret_key", "admin", "topic_perms", "group_perms",
                 "default_topic_perm", "default_group_perm"}


def _parse_account(raw: Any, where: str) -> Account:
    if not isinstance(raw, dict):
        raise AclFileError(f"{where} must be an object, got {type(raw).__name__}")
    _no_unknown_keys(raw, _ACCOUNT_KEYS, where)
    access_key = _required_str(raw, "access_key", where)
    secret_key = _required_str(raw, "secret_key", where)
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise AclFileError(f"{where}.admin must be true or false, got {admin!r}")
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        admin=admin,
        topic_perms=_perm_map(raw.get("topic_perms", {}), f"{where}.topic_perms"),
        group_perms=_perm_map(raw.get("group_perms", {}), f"{where}.group_perms"),
        default_topic_perm=parse_perm(raw.get("default_topic_perm", "DENY"),
                                      where=f"{where}.default_topic_perm"),
        default_group_perm=parse_perm(raw.get("default_group_perm", "SUB"),
                                      where=f"{where}.default_group_perm"),
    )


def _required_str(raw: dict[str, Any], name: str, where: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not value:
        raise AclFileError(f"{where}.{name} is required and must be a non-empty string")
    return value


def _perm_map(raw: Any, where: str) -> dict[str, Perm]:
    if not isinstance(raw, dict):
        raise AclFileError(f"{where} must be an object of name -> permission")
    return {name: parse_perm(value, where=f"{where}[{name!r}]") for name, value in raw.items()}


def _no_unknown_keys(raw: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise AclFileError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))} "
                           f"(allowed: {', '.join(sorted(allowed))})")
