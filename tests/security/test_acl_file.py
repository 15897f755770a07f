"""The ACL file: ``broker-lite acl check``, and a running broker reloading it on change."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from tests.support import wait_until


def _check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker_lite", "acl", "check", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.timeout(60)
def test_acl_check_prints_what_each_account_may_do(tmp_path: Path, acl_doc: dict[str, Any]
                                                   ) -> None:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(acl_doc))
    done = _check(path)
    assert done.returncode == 0, done.stderr
    assert "5 account(s), format version 2" in done.stdout
    app = done.stdout.split("\napp\n")[1].split("\ninv\n")[0]
    assert "send to topics: Orders" in app and "producer groups" in app and "rocketbox" in app


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("policy", "named"), [
    ({"resource": "Topic:A", "actions": ["Pub", "Write"]}, "policies[0].actions[1]"),
    ({"resource": "Queue:A", "actions": ["Pub"]}, "policies[0].resource"),
    ({"resource": "Topic:A*B", "actions": ["Pub"]}, "policies[0].resource"),
    ({"resource": "Topic:A", "actions": ["Pub"], "decision": "Maybe"}, "policies[0].decision"),
    ({"resource": "Topic:A", "actions": ["Pub"], "effect": "Allow"},
     "policies[0]: unknown field(s) 'effect'"),
])
def test_acl_check_names_the_bad_field(tmp_path: Path, policy: dict[str, Any],
                                       named: str) -> None:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps({"version": 2, "accounts": [
        {"access_key": "a", "secret_key": "s", "policies": [policy]}]}))
    done = _check(path)
    assert done.returncode == 2 and f"accounts[0].{named}" in done.stderr, done.stderr
    assert done.stdout == ""


def _grant_bob_pub(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    bob = next(a for a in doc["accounts"] if a["access_key"] == "bob")
    bob["policies"][0]["actions"] = ["Pub", "Sub"]
    return doc


@pytest.mark.timeout(120)
def test_a_changed_file_applies_to_open_connections(tenants: Any,
                                                    acl_doc: dict[str, Any]) -> None:
    send = m.SendRequest(producer_group="bob", message=m.WireMessage(topic="A", body=b"b"))
    with tenants.wire("bob") as bob, tenants.wire("alice") as alice:
        tenants.refused(bob, RequestCode.SEND_MESSAGE, send)
        tenants.acl_path.write_text(json.dumps(_grant_bob_pub(acl_doc)))

        def bob_may_send() -> bool:
            try:
                bob.call(RequestCode.SEND_MESSAGE, send)
            except Exception:
                return False
            return True

        wait_until(bob_may_send, timeout=30, message="the new grant never applied")
        # a broken file is refused; the accounts in force stay
        tenants.acl_path.write_text("{not json")
        wait_until(lambda: "ACL file not reloaded" in tenants.server.stderr_text(), timeout=30,
                   message="the broken file was never looked at")
        revoked = {**acl_doc, "accounts": [a for a in acl_doc["accounts"]
                                           if a["access_key"] != "bob"]}
        alice.call(RequestCode.SEND_MESSAGE, m.SendRequest(
            producer_group="alice", message=m.WireMessage(topic="A", body=b"a")))
        tenants.acl_path.write_text(json.dumps(revoked))

        def bob_refused() -> bool:
            return bob.error_of(RequestCode.PULL_MESSAGE, m.PullRequest(
                group="bob", topic="A", queue_id=0, offset=0)).code == 16

        def bob_pulls() -> bool:
            try:
                bob.call(RequestCode.PULL_MESSAGE, m.PullRequest(group="bob", topic="A",
                                                                 queue_id=0, offset=0))
            except Exception:
                return False
            return True

        wait_until(lambda: not bob_pulls(), timeout=30,
                   message="the removed account kept its rights")
        assert bob_refused()
        # alice, untouched by the change, goes on
        alice.call(RequestCode.SEND_MESSAGE, m.SendRequest(
            producer_group="alice", message=m.WireMessage(topic="A", body=b"a2")))
