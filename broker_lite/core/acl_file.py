"""Reading an ACL document: the policy format (``"version": 2``) and the older one.

Both give the same thing: a list of :class:`AccountSpec` (an access key, its
secret, whether it is an admin, its policy entries) and the clock skew. The
formats are documented in ``docs/acl.md``; every error names the field, as
``accounts[1].policies[0].actions[2]``.

The older format (no ``version``: ``topic_perms``/``group_perms`` with
``PUB``/``SUB``/``DENY``) still loads, translated entry by entry:

* a listed topic or group: Allow the bits it has, Deny the others (an exact
  name outranks the defaults, as a listed permission replaced the default);
* ``default_topic_perm`` / ``default_group_perm``: the same on ``Topic:*`` /
  ``Group:*``. **The default of ``default_group_perm`` is now ``DENY``**
  (it was ``SUB``: every account could consume in every group, and so read
  every group's retry and dead-letter topics);
* an account that may publish to some topic gets ``Pub`` on ``Group:*``
  (it may act as any producer group, as before), but a check-back and the
  end of a transaction still need ``Pub`` on the half's topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntFlag
from typing import Any

from broker_lite.core.acl_policy import (
    ACTIONS,
    ActionName,
    Decision,
    PolicyEntry,
    ResourceKind,
    ResourcePattern,
)
from broker_lite.errors import ConfigurationError

__all__ = [
    "DEFAULT_CLOCK_SKEW_SECONDS",
    "AccountSpec",
    "AclDocument",
    "AclFileError",
    "Perm",
    "parse_document",
    "parse_perm",
    "parse_resource",
]

DEFAULT_CLOCK_SKEW_SECONDS = 300.0


class AclFileError(ConfigurationError):
    """The ACL file is missing, not JSON, or has a malformed field (named in the message).

    ``path`` is the file when known (it is in the message then).
    """

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message, setting="acl")
        self.path = path


class Perm(IntFlag):
    """Permission bits of the older format."""

    DENY = 0
    PUB = 1
    SUB = 2

    @property
    def label(self) -> str:
        if self == Perm.DENY:
            return "DENY"
        return "|".join(p.name or "" for p in (Perm.PUB, Perm.SUB) if p in self)


@dataclass(frozen=True, slots=True)
class AccountSpec:
    access_key: str
    secret_key: str
    admin: bool
    entries: tuple[PolicyEntry, ...]
    #: "policies" (version 2) or "legacy" (the older format)
    source: str


@dataclass(frozen=True, slots=True)
class AclDocument:
    accounts: tuple[AccountSpec, ...]
    clock_skew_seconds: float
    version: int


def parse_perm(text: Any, *, where: str = "permission") -> Perm:
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


def parse_resource(text: Any, *, where: str) -> ResourcePattern:
    """``"Topic:Orders"``, ``"Group:inv*"``, ``"Topic:*"`` -> a :class:`ResourcePattern`."""
    if not isinstance(text, str) or ":" not in text:
        raise AclFileError(f"{where}: expected 'Topic:NAME' or 'Group:NAME' (NAME may end "
                           f"in '*' for a prefix, or be '*'), got {text!r}")
    kind_text, _, name = text.partition(":")
    kinds: dict[str, ResourceKind] = {"topic": "Topic", "group": "Group"}
    kind = kinds.get(kind_text.strip().lower())
    if kind is None:
        raise AclFileError(f"{where}: resource type {kind_text!r} is not 'Topic' or 'Group'")
    name = name.strip()
    if not name:
        raise AclFileError(f"{where}: {text!r} names no resource (use '{kind}:*' for all)")
    if "*" in name[:-1]:
        raise AclFileError(f"{where}: '*' may only end a name (a prefix), got {text!r}")
    if name.endswith("*"):
        return ResourcePattern(kind, name[:-1], prefixed=True)
    return ResourcePattern(kind, name)


def _parse_actions(raw: Any, where: str) -> frozenset[ActionName]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise AclFileError(f"{where}: expected a non-empty list of actions, from "
                           f"{', '.join(ACTIONS)} or 'All'")
    by_lower: dict[str, ActionName] = {a.lower(): a for a in ACTIONS}
    actions: set[ActionName] = set()
    for i, item in enumerate(raw):
        text = item.strip().lower() if isinstance(item, str) else ""
        if text == "all":
            actions.update(ACTIONS)
            continue
        action = by_lower.get(text)
        if action is None:
            raise AclFileError(f"{where}[{i}]: {item!r} is not an action (one of "
                               f"{', '.join(ACTIONS)}, All)")
        actions.add(action)
    return frozenset(actions)


def _parse_entry(raw: Any, where: str) -> PolicyEntry:
    if not isinstance(raw, dict):
        raise AclFileError(f"{where} must be an object with resource, actions, decision")
    _no_unknown_keys(raw, {"resource", "actions", "decision"}, where)
    if "resource" not in raw:
        raise AclFileError(f"{where}.resource is required")
    resource = parse_resource(raw["resource"], where=f"{where}.resource")
    actions = _parse_actions(raw.get("actions"), f"{where}.actions")
    decision_text = raw.get("decision", "Allow")
    decisions = {d.value.lower(): d for d in Decision}
    decision = (decisions.get(decision_text.strip().lower())
                if isinstance(decision_text, str) else None)
    if decision is None:
        raise AclFileError(f"{where}.decision must be 'Allow' or 'Deny', got {decision_text!r}")
    return PolicyEntry(resource, actions, decision)


_V2_KEYS = {"access_key", "secret_key", "admin", "policies"}
_LEGACY_KEYS = {"access_key", "secret_key", "admin", "topic_perms", "group_perms",
                "default_topic_perm", "default_group_perm"}


def _parse_v2_account(raw: Any, where: str) -> AccountSpec:
    if not isinstance(raw, dict):
        raise AclFileError(f"{where} must be an object, got {type(raw).__name__}")
    legacy = sorted(set(raw) & (_LEGACY_KEYS - _V2_KEYS))
    if legacy:
        raise AclFileError(
            f"{where}: {', '.join(map(repr, legacy))} belong(s) to the older format; a "
            "version 2 file lists 'policies' (see docs/acl.md), or drop 'version' to use "
            "the older format")
    _no_unknown_keys(raw, _V2_KEYS, where)
    policies = raw.get("policies", [])
    if not isinstance(policies, list):
        raise AclFileError(f"{where}.policies must be a list of policy entries")
    entries = tuple(_parse_entry(p, f"{where}.policies[{i}]") for i, p in enumerate(policies))
    return AccountSpec(_required_str(raw, "access_key", where),
                       _required_str(raw, "secret_key", where), _admin(raw, where), entries,
                       "policies")


def _perm_entries(kind: ResourceKind, pattern: ResourcePattern, perm: Perm,
                  deny_rest: bool) -> list[PolicyEntry]:
    granted: set[ActionName] = set()
    if Perm.PUB in perm:
        granted.add("Pub")
    if Perm.SUB in perm:
        granted.add("Sub")
    entries = []
    if granted:
        entries.append(PolicyEntry(pattern, frozenset(granted)))
    both: set[ActionName] = {"Pub", "Sub"}
    rest = frozenset(both - granted)
    if rest and deny_rest:
        entries.append(PolicyEntry(pattern, rest, Decision.DENY))
    return entries


def _parse_legacy_account(raw: Any, where: str) -> AccountSpec:
    if not isinstance(raw, dict):
        raise AclFileError(f"{where} must be an object, got {type(raw).__name__}")
    _no_unknown_keys(raw, _LEGACY_KEYS, where)
    access_key = _required_str(raw, "access_key", where)
    secret_key = _required_str(raw, "secret_key", where)
    topics = _perm_map(raw.get("topic_perms", {}), f"{where}.topic_perms")
    groups = _perm_map(raw.get("group_perms", {}), f"{where}.group_perms")
    default_topic = parse_perm(raw.get("default_topic_perm", "DENY"),
                               where=f"{where}.default_topic_perm")
    default_group = parse_perm(raw.get("default_group_perm", "DENY"),
                               where=f"{where}.default_group_perm")
    entries: list[PolicyEntry] = []
    for name, perm in topics.items():
        entries += _perm_entries("Topic", ResourcePattern("Topic", name), perm, True)
    for name, perm in groups.items():
        entries += _perm_entries("Group", ResourcePattern("Group", name), perm, True)
    entries += _perm_entries("Topic", ResourcePattern("Topic", "", prefixed=True),
                             default_topic, False)
    entries += _perm_entries("Group", ResourcePattern("Group", "", prefixed=True),
                             default_group, False)
    publishes = Perm.PUB in default_topic or any(Perm.PUB in p for p in topics.values())
    if publishes and Perm.PUB not in default_group:
        entries.append(PolicyEntry(ResourcePattern("Group", "", prefixed=True),
                                   frozenset({"Pub"})))
    return AccountSpec(access_key, secret_key, _admin(raw, where), tuple(entries), "legacy")


def parse_document(data: Any) -> AclDocument:
    """The parsed JSON document -> :class:`AclDocument`; :class:`AclFileError` names the field."""
    if not isinstance(data, dict):
        raise AclFileError("the top level must be an object with an 'accounts' list")
    _no_unknown_keys(data, {"version", "accounts", "clock_skew_seconds"}, "top level")
    version = data.get("version", 1)
    if version not in (1, 2) or isinstance(version, bool):
        raise AclFileError(f"version must be 2 (policies) or 1 / absent (the older format), "
                           f"got {version!r}")
    raw_accounts = data.get("accounts")
    if not isinstance(raw_accounts, list):
        raise AclFileError("'accounts' must be a list of account objects")
    skew = data.get("clock_skew_seconds", DEFAULT_CLOCK_SKEW_SECONDS)
    if isinstance(skew, bool) or not isinstance(skew, int | float) or skew <= 0:
        raise AclFileError(f"clock_skew_seconds must be a positive number, got {skew!r}")
    parse = _parse_v2_account if version == 2 else _parse_legacy_account
    accounts = tuple(parse(raw, f"accounts[{i}]") for i, raw in enumerate(raw_accounts))
    seen: set[str] = set()
    for i, account in enumerate(accounts):
        if account.access_key in seen:
            raise AclFileError(f"accounts[{i}].access_key: {account.access_key!r} is listed "
                               "twice")
        seen.add(account.access_key)
    return AclDocument(accounts, float(skew), int(version))


def _admin(raw: dict[str, Any], where: str) -> bool:
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise AclFileError(f"{where}.admin must be true or false, got {admin!r}")
    return admin


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
