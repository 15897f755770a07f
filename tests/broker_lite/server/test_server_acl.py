"""A broker run with ``--acl``: signed HELLOs, per-request permissions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_lite.protocol import FrameKind, RequestCode, ResponseCode, decode, encode
from broker_lite.protocol import messages as m
from tests.broker_lite.server.server_wire import StartBroker, WireClient, signed_hello
from tests.support import BrokerLiteServer

ACL = {
    "accounts": [
        {"access_key": "app", "secret_key": "app-secret",
         "topic_perms": {"Orders": "PUB|SUB", "Audit": "SUB"},
         "group_perms": {"blocked": "DENY"}, "default_group_perm": "SUB"},
        {"access_key": "root", "secret_key": "root-secret", "admin": True,
         "default_topic_perm": "PUB|SUB", "default_group_perm": "SUB"},
    ],
}


@pytest.fixture
def secured(start_broker: StartBroker, tmp_path: Path) -> Iterator[BrokerLiteServer]:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(ACL))
    with start_broker("--acl", str(path)) as server:
        with WireClient(server.native, client_id="admin",
                        hello=signed_hello("admin", "root", "root-secret")) as root:
            root.create_topic("Orders", queues=1)
            root.create_topic("Audit", queues=1)
        yield server


def _app(server: BrokerLiteServer, client_id: str = "app-1") -> WireClient:
    return WireClient(server.native, client_id=client_id,
                      hello=signed_hello(client_id, "app", "app-secret"))


def _orders_are_empty(server: BrokerLiteServer) -> bool:
    with WireClient(server.native, client_id="auditor",
                    hello=signed_hello("auditor", "root", "root-secret")) as root:
        return root.pull("Orders").messages == []


@pytest.mark.timeout(60)
def test_right_signature_may_send_and_pull(secured: BrokerLiteServer) -> None:
    with _app(secured) as app:
        app.send("Orders", b"o1", queue_id=0)
        assert [x.body for x in app.pull("Orders", group="inventory").messages] == [b"o1"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("hello", [
    signed_hello("intruder", "app", "wrong-secret"),
    signed_hello("intruder", "ghost", "app-secret"),
    m.HelloRequest(client_id="intruder"),  # no credentials at all
    m.HelloRequest(client_id="intruder", access_key="app", timestamp_ms=1, nonce="n",
                   signature="00"),
], ids=["wrong-secret", "unknown-key", "no-credentials", "bad-signature"])
def test_bad_credentials_are_unauthorized_and_nothing_is_stored(
        secured: BrokerLiteServer, hello: m.HelloRequest) -> None:
    with WireClient(secured.native, hello=False) as intruder:
        rid = intruder.start(RequestCode.HELLO, hello)
        # pipelined right behind the HELLO: must never be served
        intruder.start(RequestCode.SEND_MESSAGE, m.SendRequest(
            producer_group="pg", message=m.WireMessage(topic="Orders", body=b"evil", queue_id=0)))
        frame = intruder.response_to(rid)
        assert frame.code == ResponseCode.UNAUTHORIZED
        assert decode(frame.body, m.ErrorBody).message
        assert intruder.closed_by_peer()
    assert _orders_are_empty(secured)


@pytest.mark.timeout(60)
def test_a_replayed_hello_is_refused(secured: BrokerLiteServer) -> None:
    hello = signed_hello("app-1", "app", "app-secret")
    with WireClient(secured.native, client_id="app-1", hello=hello):
        pass
    with WireClient(secured.native, hello=False) as replay:
        error = replay.error_of(RequestCode.HELLO, hello)
        assert error.code == ResponseCode.UNAUTHORIZED and "already used" in error.body.message


@pytest.mark.timeout(60)
def test_first_frame_other_than_hello_is_unauthorized(secured: BrokerLiteServer) -> None:
    with WireClient(secured.native, hello=False) as client:
        rid = client.send_frame(FrameKind.REQUEST, RequestCode.SEND_MESSAGE, encode(
            m.SendRequest(producer_group="pg", message=m.WireMessage(topic="Orders", body=b"x"))))
        assert client.response_to(rid).code == ResponseCode.UNAUTHORIZED
        assert client.closed_by_peer()
    assert _orders_are_empty(secured)


@pytest.mark.timeout(60)
def test_permissions_are_checked_per_request(secured: BrokerLiteServer) -> None:
    with _app(secured) as app:
        error = app.error_of(RequestCode.SEND_MESSAGE, m.SendRequest(
            producer_group="pg", message=m.WireMessage(topic="Audit", body=b"x")))
        assert error.code == ResponseCode.NO_PERMISSION and "'Audit'" in error.body.message
        error = app.error_of(RequestCode.PULL_MESSAGE, m.PullRequest(
            group="blocked", topic="Orders", queue_id=0, offset=0))
        assert error.code == ResponseCode.NO_PERMISSION and "'blocked'" in error.body.message
        error = app.error_of(RequestCode.TOPIC_CREATE, m.TopicCreateRequest(topic="Mine"))
        assert error.code == ResponseCode.NO_PERMISSION
        assert "Create on Topic:Mine" in error.body.message
        error = app.error_of(RequestCode.HEARTBEAT, m.HeartbeatRequest(
            client_id="app-1", consumers=[m.ConsumerSubscription(group="g", topic="Secret")]))
        assert error.code == ResponseCode.NO_PERMISSION
        # what it may do still works on the same connection
        app.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(
            client_id="app-1", producer_groups=["pg"],
            consumers=[m.ConsumerSubscription(group="inventory", topic="Orders")]))
        assert app.pull("Audit").status == "no_new_message"
