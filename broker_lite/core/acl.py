"""Access control: who may connect, and what each account may do.

Pure logic, no sockets: the native door (:mod:`broker_lite.server`) and the
gRPC door (:mod:`broker_lite.grpc_door`) both authenticate and authorise
through this module. The model is RocketMQ 5's ACL 2.0
(:mod:`~broker_lite.core.acl_policy`): subjects are accounts, resources are
topics and groups (by name, prefix or ``*``), actions are Pub, Sub, Create,
Update, Delete, Get and List, decisions Allow or Deny, and the default is
deny. The file formats are in :mod:`~broker_lite.core.acl_file` and
``docs/acl.md`` (with the table of what each request needs).

Rules beyond the entries (the broker's, whatever a file says):

- **Authentication.** A native client signs its HELLO (hex HMAC-SHA256 over
  ``f"{client_id}\\n{timestamp_ms}\\n{nonce}"``, :mod:`broker_lite.protocol.
  signing`); the timestamp must be within ``clock_skew_seconds`` and a nonce is
  accepted once per access key while its timestamp is valid. An unknown access
  key and a wrong signature get the same answer.
- **Retry and dead-letter topics** (``%RETRY%G``, ``%DLQ%G``) belong to group
  ``G``: reading one needs Sub on ``Group:G``; nobody sends to one (the broker
  writes them when a member of ``G`` sends a message back), and nobody creates
  a topic under those prefixes. The broker's own topics (``RMQ_SYS_*``,
  ``SCHEDULE_TOPIC_XXXX``) are read by admins only.
- **Producer groups** are groups: acting as one (registering, receiving its
  check-backs, ending its transactions) needs Pub on ``Group:G``; a check-back
  and an end also need Pub on the half's real topic.
- **Admin** accounts may Create, Update, Delete, Get and List everything an
  entry does not deny, and run the operations requests; Pub and Sub still come
  from their entries, as in RocketMQ's plain ACL.

Errors: :class:`AclFileError` (a ``ValueError``) for a malformed file, naming
the field; :class:`~broker_lite.errors.UnauthorizedError` for bad credentials;
:class:`~broker_lite.errors.NoPermissionError` for a refused operation.
"""

from __future__ import annotations

import heapq
import hmac
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from broker_lite.core.acl_file import (
    DEFAULT_CLOCK_SKEW_SECONDS,
    AccountSpec,
    AclFileError,
    Perm,
    parse_document,
    parse_perm,
)
from broker_lite.core.acl_policy import ActionName, PolicyEntry, ResourceKind, decide
from broker_lite.core.log_safe import printable
from broker_lite.errors import NoPermissionError, UnauthorizedError
from broker_lite.values.names import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, SYSTEM_TOPIC_PREFIX

__all__ = [
    "BAD_CREDENTIALS",
    "DLQ_PREFIX",
    "RETRY_PREFIX",
    "Account",
    "Acl",
    "AclFileError",
    "Action",
    "Perm",
    "group_of_system_topic",
    "parse_perm",
    "printable",
]

log = logging.getLogger("broker_lite.acl")

_BROKER_TOPICS = (SYSTEM_TOPIC_PREFIX, SCHEDULE_TOPIC)
_SPECIAL_TOPICS = ("%", *_BROKER_TOPICS)
_REAL_TOPIC = "REAL_TOPIC"
_RETRY_TOPIC = "RETRY_TOPIC"
_MANAGEMENT: frozenset[ActionName] = frozenset({"Create", "Update", "Delete", "Get", "List"})
_CACHE_LIMIT = 4096
#: the one answer to an unknown access key and to a wrong signature (no key probing)
BAD_CREDENTIALS = "the signature does not match (or the access key is unknown)"

Action = Literal["Pub", "Sub"]


def group_of_system_topic(topic: str) -> str | None:
    """``"%RETRY%G"`` or ``"%DLQ%G"`` -> ``"G"``; any other topic -> ``None``."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return None


def is_broker_topic(topic: str) -> bool:
    """One of the broker's own topics (halves, op records, schedules, discarded halves)."""
    return topic.startswith(_BROKER_TOPICS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Account:
    """One access key and what it may do."""

    access_key: str
    secret_key: str = field(repr=False)
    admin: bool = False
    entries: tuple[PolicyEntry, ...] = ()
    _decisions: dict[tuple[str, str, str], bool] = field(
        default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_spec(cls, spec: AccountSpec) -> Account:
        return cls(access_key=spec.access_key, secret_key=spec.secret_key, admin=spec.admin,
                   entries=spec.entries)

    @classmethod
    def revoked(cls, access_key: str) -> Account:
        """What a connection authenticated as ``access_key`` may do once the key is
        removed from the file: nothing."""
        return cls(access_key=access_key, secret_key="")

    # -- the decision -------------------------------------------------------------------

    def allows(self, kind: ResourceKind, name: str, action: ActionName) -> bool:
        """Whether the entries allow ``action`` on ``kind:name`` (admins: management too)."""
        key = (kind, name, action)
        hit = self._decisions.get(key)
        if hit is None:
            entry = decide(self.entries, kind, name, action)
            if entry is None:
                hit = self.admin and action in _MANAGEMENT
            else:
                hit = entry.decision.value == "Allow"
            if len(self._decisions) >= _CACHE_LIMIT:
                self._decisions.clear()
            self._decisions[key] = hit
        return hit

    def check(self, kind: ResourceKind, name: str, action: ActionName, doing: str) -> None:
        """Raise :class:`NoPermissionError` unless ``action`` on ``kind:name`` is allowed."""
        if self.allows(kind, name, action):
            return
        entry = decide(self.entries, kind, name, action)
        why = (f"denied by '{entry}'" if entry is not None
               else "no entry allows it; the default is deny")
        raise NoPermissionError(
            f"access key {printable(self.access_key)!r} may not {doing}: that needs {action} "
            f"on {kind}:{printable(name)} ({why})")

    # -- what the doors ask -------------------------------------------------------------

    def check_topic(self, topic: str, action: Action) -> None:
        """Send (Pub) to or read (Sub) ``topic``; retry/DLQ topics follow their group."""
        if topic.startswith(_SPECIAL_TOPICS):
            self._check_special_topic(topic, action)
        elif not self.allows("Topic", topic, action):
            self.check("Topic", topic, action,
                       f"{'send to' if action == 'Pub' else 'read'} topic {printable(topic)!r}")

    def _check_special_topic(self, topic: str, action: Action) -> None:
        group = group_of_system_topic(topic)
        if group is not None:
            if action == "Pub":
                raise NoPermissionError(
                    f"{printable(topic)!r} is not sent to: the broker writes it when a member "
                    f"of group {printable(group)!r} sends a message back")
            if not self.allows("Group", group, "Sub"):
                self.check("Group", group, "Sub", f"read {printable(topic)!r}, which belongs "
                                                  f"to group {printable(group)!r}")
            return
        if is_broker_topic(topic):
            if action == "Sub" and self.admin:
                return
            raise NoPermissionError(f"{printable(topic)!r} is one of the broker's own topics")
        if not self.allows("Topic", topic, action):
            self.check("Topic", topic, action,
                       f"{'send to' if action == 'Pub' else 'read'} topic {printable(topic)!r}")

    def check_group(self, group: str) -> None:
        """Consume in ``group`` (pull, offsets, acks, send-back): Sub on the group."""
        if not self.allows("Group", group, "Sub"):
            self.check("Group", group, "Sub", f"consume in group {printable(group)!r}")

    def check_consume(self, topic: str, group: str) -> None:
        self.check_group(group)
        self.check_topic(topic, "Sub")

    def check_producer(self, producer_group: str) -> None:
        """Register as ``producer_group``: Pub on the group."""
        if not self.allows("Group", producer_group, "Pub"):
            self.check("Group", producer_group, "Pub",
                       f"act as producer group {printable(producer_group)!r}")

    def may_produce(self, producer_group: str, topic: str) -> bool:
        """May act for ``producer_group`` on a half of ``topic`` (get its check-back, end it)."""
        return (self.allows("Group", producer_group, "Pub")
                and group_of_system_topic(topic) is None and not is_broker_topic(topic)
                and self.allows("Topic", topic, "Pub"))

    def check_transaction(self, producer_group: str, topic: str) -> None:
        """End a transaction of ``producer_group`` whose half is on ``topic``."""
        self.check_producer(producer_group)
        self.check_topic(topic, "Pub")

    def check_create_topic(self, topic: str, *, exists: bool) -> None:
        """Create (or, when it ``exists``, update) ``topic``: never under %RETRY%/%DLQ%."""
        if group_of_system_topic(topic) is not None or is_broker_topic(topic):
            raise NoPermissionError(
                f"topic {printable(topic)!r} is reserved: the broker creates retry, "
                "dead-letter and system topics itself")
        action: ActionName = "Update" if exists else "Create"
        self.check("Topic", topic, action,
                   f"{'update' if exists else 'create'} topic {printable(topic)!r}")

    def check_auto_create(self, topic: str) -> None:
        """A send that creates ``topic``: Create on it, or Pub granted on that exact name (a
        prefix or ``*`` grant does not bound how many topics a send could create)."""
        entry = decide(self.entries, "Topic", topic, "Pub")
        if entry is not None and not entry.resource.prefixed \
                and entry.decision.value == "Allow":
            return
        self.check_create_topic(topic, exists=False)

    def may_read_message(self, topic: str, properties: Mapping[str, str]) -> bool:
        """A key or id lookup shows a message only to who may read its real topic."""
        real = topic
        if topic.startswith(_BROKER_TOPICS) and _REAL_TOPIC in properties:
            real = properties[_REAL_TOPIC]  # a half: its topic once committed
        try:
            if group_of_system_topic(topic) is not None:
                self.check_topic(topic, "Sub")  # the group's
                real = properties.get(_RETRY_TOPIC, "")
                if not real:
                    return self.admin
            self.check_topic(real, "Sub")
        except NoPermissionError:
            return False
        return True

    def check_admin(self, operation: str) -> None:
        if not self.admin:
            raise NoPermissionError(
                f"{operation} needs an admin account; access key "
                f"{printable(self.access_key)!r} is not one")


class Acl:
    """The accounts of an ACL file, and the nonce memory that stops replays.

    Thread-safe: both doors may authenticate concurrently. :meth:`reload_if_changed`
    swaps in a new version of the file in place, so every holder sees it.
    """

    def __init__(self, accounts: list[Account], *,
                 clock_skew_seconds: float = DEFAULT_CLOCK_SKEW_SECONDS) -> None:
        if clock_skew_seconds <= 0:
            raise AclFileError(f"clock_skew_seconds must be positive, got {clock_skew_seconds}")
        self._accounts = self._by_key(accounts)
        self.clock_skew_ms = int(clock_skew_seconds * 1000)
        self._lock = threading.Lock()
        # (access_key, nonce) -> expiry; the heap orders expiries for pruning
        self._seen: set[tuple[str, str]] = set()
        self._expiries: list[tuple[int, tuple[str, str]]] = []
        self.path: Path | None = None
        self._stamp: tuple[float, int] | None = None
        #: the file format: 2 (policies) or 1 (the older topic_perms/group_perms)
        self.version = 2

    @staticmethod
    def _by_key(accounts: list[Account]) -> dict[str, Account]:
        by_key: dict[str, Account] = {}
        for account in accounts:
            if account.access_key in by_key:
                raise AclFileError(f"access_key {account.access_key!r} is listed twice")
            by_key[account.access_key] = account
        return by_key

    @property
    def accounts(self) -> list[Account]:
        return list(self._accounts.values())

    @classmethod
    def load(cls, path: str | Path) -> Acl:
        """Read an ACL file; :class:`AclFileError` names the file and the bad field."""
        path = Path(path)
        stamp = _stamp(path)
        acl = cls.from_dict(_read(path), where=str(path))
        acl.path, acl._stamp = path, stamp
        return acl

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "") -> Acl:
        """Build from the parsed JSON document (either format, see docs/acl.md)."""
        try:
            doc = parse_document(data)
        except AclFileError as exc:
            if not where:
                raise
            raise AclFileError(f"ACL file {where}: {exc}", path=where) from None
        acl = cls([Account.from_spec(s) for s in doc.accounts],
                  clock_skew_seconds=doc.clock_skew_seconds)
        acl.version = doc.version
        return acl

    def reload_if_changed(self) -> bool:
        """Read the file again if it changed since loaded; True when new accounts apply.

        A file that no longer parses is logged (naming the field) and the
        accounts in force stay.
        """
        if self.path is None:
            return False
        try:
            stamp = _stamp(self.path)
        except AclFileError as exc:
            if self._stamp is not None:
                log.error("ACL file not reloaded, the accounts in force stay: %s", exc)
                self._stamp = None
            return False
        if stamp == self._stamp:
            return False
        try:
            fresh = Acl.from_dict(_read(self.path), where=str(self.path))
        except AclFileError as exc:
            log.error("ACL file not reloaded, the accounts in force stay: %s", exc)
            self._stamp = stamp
            return False
        with self._lock:
            self._accounts = fresh._accounts
            self.clock_skew_ms = fresh.clock_skew_ms
            self._stamp = stamp
        log.info("ACL file %s reloaded: %d account(s)", self.path, len(fresh._accounts))
        return True

    def secret_for(self, access_key: str) -> str | None:
        """The secret of ``access_key`` (the gRPC door verifies MQv2-HMAC-SHA1 with it)."""
        account = self._accounts.get(access_key)
        return account.secret_key if account is not None else None

    def account(self, access_key: str) -> Account | None:
        return self._accounts.get(access_key)

    def current(self, access_key: str) -> Account:
        """The account in force for a connection that authenticated as ``access_key``
        (after a reload that removed the key: one that may do nothing)."""
        account = self._accounts.get(access_key)
        return account if account is not None else Account.revoked(access_key)

    def authenticate(self, access_key: str, timestamp_ms: int, nonce: str, now_ms: int, *,
                     signed_by: Callable[[str], bool]) -> Account:
        """Check a signed HELLO and return its account.

        ``signed_by(secret)`` says whether the request was signed with that
        secret key; the door that received it knows its signature formula.
        Raises :class:`UnauthorizedError` for a missing key, an unknown key or
        a bad signature (one answer for both), a timestamp outside the allowed
        clock skew, or a nonce seen before.
        """
        if not access_key:
            raise UnauthorizedError("credentials required: HELLO carries no access_key")
        if not nonce:
            raise UnauthorizedError("HELLO carries no nonce")
        account = self._accounts.get(access_key)
        # an unknown key costs the same HMAC as a known one: its answer tells nothing
        signed = signed_by(account.secret_key if account is not None else _NO_SECRET)
        if account is None or not signed:
            raise UnauthorizedError(BAD_CREDENTIALS)
        if abs(now_ms - timestamp_ms) > self.clock_skew_ms:
            raise UnauthorizedError(
                f"HELLO timestamp {timestamp_ms} is {abs(now_ms - timestamp_ms)} ms away from "
                f"the broker's clock (allowed: {self.clock_skew_ms} ms)")
        key = (access_key, nonce)
        with self._lock:
            self._prune(now_ms)
            if key in self._seen:
                raise UnauthorizedError(
                    f"nonce {printable(nonce)!r} was already used (replayed HELLO)")
            self._seen.add(key)
            heapq.heappush(self._expiries, (timestamp_ms + self.clock_skew_ms, key))
        return account

    def _prune(self, now_ms: int) -> None:
        """Forget nonces whose timestamps could no longer pass the skew check."""
        while self._expiries and self._expiries[0][0] < now_ms:
            _, key = heapq.heappop(self._expiries)
            self._seen.discard(key)


_NO_SECRET = hmac.new(b"broker_lite", b"no such account", "sha256").hexdigest()


def _stamp(path: Path) -> tuple[float, int]:
    try:
        st = path.stat()
    except OSError as exc:
        raise AclFileError(f"cannot read ACL file {path}: {exc.strerror or exc}",
                           path=str(path)) from exc
    return st.st_mtime, st.st_size


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise AclFileError(f"cannot read ACL file {path}: {exc.strerror or exc}",
                           path=str(path)) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AclFileError(f"ACL file {path} is not valid JSON: {exc}",
                           path=str(path)) from exc
