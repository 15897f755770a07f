"""Policy entries and how they decide: RocketMQ 5 ACL 2.0's model, in small.

An entry says: on this *resource* (a topic or a group, named exactly, by a
prefix, or all of them), these *actions* are allowed or denied. To decide an
action on a resource, the entries that name the action and match the resource
are ranked as RocketMQ ranks them (``AclAuthorizationHandler``): an exact name
before a prefix, a longer prefix before a shorter one, a prefix before ``*``,
and on a tie Deny before Allow. The first one decides. No entry: denied.

Pure data and logic; :mod:`broker_lite.core.acl` builds accounts from it and
:mod:`broker_lite.core.acl_file` parses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

__all__ = [
    "ACTIONS",
    "ActionName",
    "Decision",
    "PolicyEntry",
    "ResourceKind",
    "ResourcePattern",
    "decide",
]

ResourceKind = Literal["Topic", "Group"]
ActionName = Literal["Pub", "Sub", "Create", "Update", "Delete", "Get", "List"]
#: every action, in the order they are printed
ACTIONS: tuple[ActionName, ...] = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List")


class Decision(Enum):
    ALLOW = "Allow"
    DENY = "Deny"


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """``Topic:Orders`` (exact), ``Topic:Ord*`` (prefix ``Ord``) or ``Topic:*`` (all)."""

    kind: ResourceKind
    #: the exact name, or the prefix when ``prefixed``; ``""`` with ``prefixed`` = all
    name: str
    prefixed: bool = False

    def matches(self, kind: ResourceKind, name: str) -> bool:
        if kind != self.kind:
            return False
        return name.startswith(self.name) if self.prefixed else name == self.name

    @property
    def rank(self) -> int:
        """Higher is more specific: exact > longer prefix > shorter prefix > ``*``."""
        return 1_000_000 if not self.prefixed else len(self.name)

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}{'*' if self.prefixed else ''}"


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One line of an account's policy."""

    resource: ResourcePattern
    actions: frozenset[ActionName]
    decision: Decision = Decision.ALLOW

    def __str__(self) -> str:
        acts = ",".join(a for a in ACTIONS if a in self.actions)
        return f"{self.decision.value} {acts} on {self.resource}"


def decide(entries: tuple[PolicyEntry, ...], kind: ResourceKind, name: str,
           action: ActionName) -> PolicyEntry | None:
    """The entry that decides ``action`` on ``kind:name`` (``None``: no entry, so denied)."""
    best: PolicyEntry | None = None
    best_key = (-1, False)
    for entry in entries:
        if action not in entry.actions or not entry.resource.matches(kind, name):
            continue
        key = (entry.resource.rank, entry.decision is Decision.DENY)
        if key > best_key:
            best, best_key = entry, key
    return best
