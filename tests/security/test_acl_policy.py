"""How policy entries decide (RocketMQ ACL 2.0's ranking), and the older format's
translation: unit tests of broker_lite.core.acl, no broker."""

from __future__ import annotations

from typing import Any

import pytest

from broker_lite.core.acl import Account, Acl
from broker_lite.errors import NoPermissionError


def _account(*policies: dict[str, Any], admin: bool = False) -> Account:
    acl = Acl.from_dict({"version": 2, "accounts": [
        {"access_key": "a", "secret_key": "s", "admin": admin, "policies": list(policies)}]})
    account = acl.account("a")
    assert account is not None
    return account


@pytest.mark.timeout(10)
def test_exact_beats_prefix_beats_all_and_deny_wins_a_tie() -> None:
    account = _account(
        {"resource": "Topic:*", "actions": ["Pub"]},
        {"resource": "Topic:Pay*", "actions": ["Pub"], "decision": "Deny"},
        {"resource": "Topic:Payments*", "actions": ["Pub"]},
        {"resource": "Topic:PayrollSecret", "actions": ["Pub"], "decision": "Deny"},
        {"resource": "Topic:Tie", "actions": ["Sub"]},
        {"resource": "Topic:Tie", "actions": ["Sub"], "decision": "Deny"},
    )
    assert account.allows("Topic", "Anything", "Pub")          # *
    assert not account.allows("Topic", "Payroll", "Pub")       # Pay* denies
    assert account.allows("Topic", "PaymentsEU", "Pub")        # the longer prefix allows
    assert not account.allows("Topic", "PayrollSecret", "Pub")  # exact
    assert not account.allows("Topic", "Tie", "Sub")           # Deny wins a tie
    assert not account.allows("Topic", "Anything", "Sub")      # no entry: denied
    with pytest.raises(NoPermissionError, match=r"denied by 'Deny Pub on Topic:Pay\*'"):
        account.check_topic("Payroll", "Pub")


@pytest.mark.timeout(10)
def test_admins_manage_but_pub_and_sub_come_from_entries() -> None:
    root = _account({"resource": "Topic:Audit", "actions": ["Create"], "decision": "Deny"},
                    admin=True)
    assert root.allows("Topic", "Orders", "Create") and root.allows("Group", "g", "List")
    assert not root.allows("Topic", "Audit", "Create")  # an entry still denies
    assert not root.allows("Topic", "Orders", "Pub")
    with pytest.raises(NoPermissionError, match="reserved"):
        root.check_create_topic("%DLQ%g", exists=False)


@pytest.mark.timeout(10)
def test_retry_and_dlq_messages_are_shown_to_who_reads_both_group_and_topic() -> None:
    member = _account({"resource": "Group:inventory", "actions": ["Sub"]},
                      {"resource": "Topic:Orders", "actions": ["Sub"]})
    other = _account({"resource": "Group:inventory", "actions": ["Sub"]})
    props = {"RETRY_TOPIC": "Orders"}
    assert member.may_read_message("%DLQ%inventory", props)
    assert not other.may_read_message("%DLQ%inventory", props)  # no Sub on Orders
    assert member.may_read_message("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC": "Orders"})
    assert not member.may_read_message("RMQ_SYS_TRANS_HALF_TOPIC", {"REAL_TOPIC": "Audit"})


@pytest.mark.timeout(10)
def test_the_older_format_translates_and_no_longer_grants_every_group() -> None:
    acl = Acl.from_dict({"accounts": [
        {"access_key": "alice", "secret_key": "s", "topic_perms": {"A": "PUB|SUB"}},
        {"access_key": "old", "secret_key": "s", "topic_perms": {"A": "SUB"},
         "default_group_perm": "SUB"}]})
    alice, old = acl.account("alice"), acl.account("old")
    assert alice is not None and old is not None and acl.version == 1
    assert not alice.allows("Group", "inventory", "Sub")     # was SUB by default
    alice.check_producer("rocketbox")                          # any publisher, as before
    assert alice.may_produce("rocketbox", "A") and not alice.may_produce("rocketbox", "Orders")
    old.check_group("inventory")                               # written: kept
