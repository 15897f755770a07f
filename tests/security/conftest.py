"""The security suite's broker: one ``broker-lite serve`` with both doors and issue 27's
five accounts, attacked from loopback as a tenant of a shared broker would.

The accounts (``ACL``, the policy format of docs/acl.md):

* ``root``: admin, everything;
* ``app``: Pub and Sub on ``Orders``, producer group ``rocketbox``;
* ``inv``: Sub on ``Orders``, consumer group ``inventory``;
* ``alice``: Pub and Sub on topic ``A`` only (her own groups ``alice``);
* ``bob``: Sub on ``A`` only (his group ``bob``).

``acl_broker`` starts a broker with that file (``--auto-create-topics`` off, fast
check-backs); ``legacy_acl_broker`` one with the same accounts in the older file format,
where alice and bob may act for any producer group (what that format always allowed).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_lite.errors import ResponseCode
from broker_lite.protocol import FrameKind, RequestCode, decode, encode
from broker_lite.protocol import messages as m
from tests.broker_lite.server.server_wire import WireClient, signed_hello
from tests.support import BrokerLiteServer, broker_starter

SECRETS = {"root": "root-secret", "app": "app-secret", "inv": "inv-secret",
           "alice": "alice-secret", "bob": "bob-secret"}


def _allow(resource: str, *actions: str) -> dict[str, Any]:
    return {"resource": resource, "actions": list(actions), "decision": "Allow"}


ACL: dict[str, Any] = {
    "version": 2,
    "accounts": [
        {"access_key": "root", "secret_key": SECRETS["root"], "admin": True,
         "policies": [_allow("Topic:*", "All"), _allow("Group:*", "All")]},
        {"access_key": "app", "secret_key": SECRETS["app"],
         "policies": [_allow("Topic:Orders", "Pub", "Sub"), _allow("Group:rocketbox", "Pub"),
                      _allow("Group:app", "Sub")]},
        {"access_key": "inv", "secret_key": SECRETS["inv"],
         "policies": [_allow("Topic:Orders", "Sub"), _allow("Group:inventory", "Sub")]},
        {"access_key": "alice", "secret_key": SECRETS["alice"],
         "policies": [_allow("Topic:A", "Pub", "Sub"), _allow("Group:alice", "Pub", "Sub")]},
        {"access_key": "bob", "secret_key": SECRETS["bob"],
         "policies": [_allow("Topic:A", "Sub"), _allow("Group:bob", "Sub")]},
    ],
}

#: the same accounts in the older format (``topic_perms``/``group_perms``)
LEGACY_ACL: dict[str, Any] = {
    "accounts": [
        {"access_key": "root", "secret_key": SECRETS["root"], "admin": True,
         "default_topic_perm": "PUB|SUB", "default_group_perm": "PUB|SUB"},
        {"access_key": "app", "secret_key": SECRETS["app"],
         "topic_perms": {"Orders": "PUB|SUB"}, "group_perms": {"app": "SUB"}},
        {"access_key": "inv", "secret_key": SECRETS["inv"],
         "topic_perms": {"Orders": "SUB"}, "group_perms": {"inventory": "SUB"}},
        {"access_key": "alice", "secret_key": SECRETS["alice"],
         "topic_perms": {"A": "PUB|SUB"}, "group_perms": {"alice": "SUB"}},
        {"access_key": "bob", "secret_key": SECRETS["bob"],
         "topic_perms": {"A": "SUB"}, "group_perms": {"bob": "SUB"}},
    ],
}

#: check-backs ~1 s after a half, every 0.5 s; retries fast; topics made only by Create
FLAGS = ("--tx-timeout", "1", "--tx-check-interval", "0.5", "--delay-time-scale", "0.01",
         "--no-auto-create-topics", "--grpc-max-delivery-attempts", "3")


def _start(tmp_path: Path, doc: dict[str, Any]) -> Iterator[BrokerLiteServer]:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(doc))
    with broker_starter(tmp_path, FLAGS)("--acl", str(acl)) as server:
        with wire(server, "root", "root-setup") as root:
            for topic in ("Orders", "A"):
                root.create_topic(topic, queues=1)
        yield server


@pytest.fixture
def acl_doc() -> dict[str, Any]:
    """The five accounts' ACL document (a deep copy to change)."""
    return json.loads(json.dumps(ACL))


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    yield from _start(tmp_path, ACL)


@pytest.fixture
def legacy_acl_broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    yield from _start(tmp_path, LEGACY_ACL)


class Tenants:
    """What the tests do as the accounts: native connections, answers to check-backs."""

    def __init__(self, server: BrokerLiteServer, acl_path: Path) -> None:
        self.server = server
        #: the file the broker was started with (rewrite it to test a reload)
        self.acl_path = acl_path

    def wire(self, account: str, client_id: str | None = None) -> WireClient:
        """A native connection signed as ``account`` (client id: a fresh one by default)."""
        return wire(self.server, account, client_id)

    @staticmethod
    def refused(client: WireClient, code: RequestCode, body: Any) -> str:
        """Call; expect NO_PERMISSION or UNAUTHORIZED; the error's message."""
        error = client.error_of(code, body)
        assert error.code in (ResponseCode.NO_PERMISSION, ResponseCode.UNAUTHORIZED), error
        return error.body.message

    @staticmethod
    def wait_check(client: WireClient, timeout: float = 20.0) -> tuple[int, Any] | None:
        """The next check-back sent to ``client`` within ``timeout``, as ``(request id,
        CheckTransactionRequest)``; ``None`` when none came."""
        deadline = time.monotonic() + timeout
        while True:
            while client.server_requests:
                frame = client.server_requests.popleft()
                if frame.code == RequestCode.CHECK_TRANSACTION_STATE:
                    return frame.request_id, decode(frame.body, m.CheckTransactionRequest)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            client.sock.settimeout(min(left, 1.0))
            try:
                frame = client.read_frame()
            except (TimeoutError, OSError):
                continue
            finally:
                client.sock.settimeout(30.0)
            if frame is None:
                return None
            if frame.kind != FrameKind.RESPONSE:
                client.server_requests.append(frame)

    @staticmethod
    def answer_check(client: WireClient, request_id: int, state: int) -> None:
        client.send_frame(FrameKind.RESPONSE, ResponseCode.SUCCESS,
                          encode(m.CheckTransactionResponse(state=state)),
                          request_id=request_id)

    def stored(self, topic: str) -> int:
        """Messages stored on ``topic`` (root asks)."""
        with self.wire("root") as root:
            answer = root.call(RequestCode.TOPIC_LIST, m.Empty())
        return sum(sum(t.max_offsets) for t in answer.topics if t.topic == topic)

    def topics(self) -> set[str]:
        with self.wire("root") as root:
            return {t.topic for t in root.call(RequestCode.TOPIC_LIST, m.Empty()).topics}


@pytest.fixture
def tenants(acl_broker: BrokerLiteServer, tmp_path: Path) -> Tenants:
    return Tenants(acl_broker, tmp_path / "acl.json")


@pytest.fixture
def legacy_tenants(legacy_acl_broker: BrokerLiteServer, tmp_path: Path) -> Tenants:
    return Tenants(legacy_acl_broker, tmp_path / "acl.json")


def wire(server: BrokerLiteServer, account: str, client_id: str | None = None) -> WireClient:
    cid = client_id or f"{account}-{os.urandom(4).hex()}"
    return WireClient(server.native, client_id=cid,
                      hello=signed_hello(cid, account, SECRETS[account]))
