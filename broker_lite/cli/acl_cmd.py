"""``broker-lite acl check FILE``: validate an ACL file and say what each account may do.

Exit 0 with a summary per account; exit 2 with one error naming the field
(``accounts[1].policies[0].actions[2]: ...``). The format is in docs/acl.md.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

from broker_lite.core.acl import Account, Acl, AclFileError
from broker_lite.core.acl_policy import ACTIONS, Decision, ResourceKind

__all__ = ["describe", "register", "run"]

_OLDER_FORMAT_NOTE = (
    "note: this file is in the older format (no \"version\"); it loads as documented in "
    "docs/acl.md: default_group_perm now defaults to DENY, and an account that may publish "
    "may act for any producer group (check-backs and ends still need Pub on the half's topic)")


def register(sub: Any) -> None:
    p = sub.add_parser("acl", help="check an ACL file",
                       description="Check an ACL file (docs/acl.md) before a broker loads it.")
    commands = p.add_subparsers(dest="acl_command", metavar="ACTION")
    commands.required = True
    check = commands.add_parser(
        "check", help="validate an ACL file and print what each account may do",
        description="Validate FILE as `broker-lite serve --acl FILE` would, and print what "
                    "each account may do. Exit status 2, with the field named, when it is "
                    "not valid.")
    check.add_argument("file", type=Path, metavar="FILE", help="the JSON ACL file")
    check.set_defaults(handler=functools.partial(run, parser=check))


def _names(account: Account, kind: ResourceKind, action: str) -> list[str]:
    """The resources an account's Allow entries name for ``action`` (``*`` = a prefix)."""
    return sorted({str(e.resource).partition(":")[2] for e in account.entries
                   if e.resource.kind == kind and action in e.actions
                   and e.decision is Decision.ALLOW})


def describe(account: Account) -> list[str]:
    """Human lines: the entries, then what they let the account do."""
    lines = [f"{account.access_key}{' (admin)' if account.admin else ''}"]
    if not account.entries:
        lines.append("  no entries: may do nothing but connect")
    lines += [f"  {entry}" for entry in account.entries]

    def summary(label: str, names: list[str]) -> None:
        if names:
            lines.append(f"  => {label}: {', '.join(names)}")

    summary("send to topics", _names(account, "Topic", "Pub"))
    summary("read topics", _names(account, "Topic", "Sub"))
    summary("consume in groups (and read their %RETRY%/%DLQ% topics)",
            _names(account, "Group", "Sub"))
    summary("act as producer groups (on halves of topics it may send to)",
            _names(account, "Group", "Pub"))
    for action in ACTIONS[2:]:
        summary(f"{action} topics", _names(account, "Topic", action))
    if account.admin:
        lines.append("  => admin: Create, Update, Delete, Get and List anything no entry "
                     "denies; the operations requests (console)")
    return lines


def run(args: argparse.Namespace, *, parser: argparse.ArgumentParser) -> int:
    del parser  # the handler signature of every subcommand
    path: Path = args.file
    try:
        acl = Acl.load(path)
    except AclFileError as exc:
        print(f"broker-lite acl check: {exc}", file=sys.stderr)
        return 2
    accounts = acl.accounts
    print(f"{path}: valid, {len(accounts)} account(s), format version {acl.version}, "
          f"clock skew {acl.clock_skew_ms / 1000:g} s")
    if acl.version == 1:
        print(_OLDER_FORMAT_NOTE)
    for account in accounts:
        print("\n".join(describe(account)))
    return 0
