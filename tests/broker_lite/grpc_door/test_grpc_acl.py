"""Credentials on the gRPC door: MQv2-HMAC-SHA1 signatures and the ACL's permissions.

Right keys work; wrong or missing keys are answered UNAUTHORIZED, with a
message saying why, and nothing is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.v5.exception import UnauthorizedException

from broker_lite.client import Admin
from broker_lite.core.acl import BAD_CREDENTIALS
from tests.broker_lite.grpc_door.grpc_support import (
    ClientLog,
    StartGrpcBroker,
    config,
    make_message,
    raw_metadata,
    raw_stub,
    receive,
    running,
)
from tests.support import BrokerLiteServer

pytestmark = pytest.mark.grpc

ACL = {
    "accounts": [
        {"access_key": "writer", "secret_key": "w-secret",
         "topic_perms": {"Secure": "PUB|SUB"}, "group_perms": {"auditors": "SUB"},
         "default_group_perm": "DENY"},
        {"access_key": "reader", "secret_key": "r-secret", "topic_perms": {"Secure": "SUB"}},
    ],
}


@pytest.fixture
def acl_broker(start_grpc_broker: StartGrpcBroker, tmp_path: Path) -> Iterator[BrokerLiteServer]:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    with start_grpc_broker("--acl", str(acl)) as server:
        yield server


def _stored(broker: BrokerLiteServer, topic: str) -> int:
    """Messages stored on ``topic`` (asked through the native door)."""
    with Admin(broker.native, access_key="writer", secret_key="w-secret") as admin:
        return sum(sum(t.max_offsets) for t in admin.list_topics() if t.topic == topic)


def _route(broker: BrokerLiteServer, metadata: list[tuple[str, str]]) -> object:
    with raw_stub(broker.grpc) as stub:
        return stub.QueryRoute(service_pb2.QueryRouteRequest(
            topic=definition_pb2.Resource(name="Secure")), metadata=metadata, timeout=10)


@pytest.mark.timeout(60)
def test_right_keys_send_and_consume(acl_broker: BrokerLiteServer) -> None:
    cfg = config(acl_broker.grpc, "writer", "w-secret")
    consumer = SimpleConsumer(cfg, "auditors", {"Secure": FilterExpression()}, await_duration=1)
    with running(Producer(cfg, ("Secure",))) as producer, running(consumer):
        sent = producer.send(make_message("Secure", "classified"))
        (got,) = receive(consumer, 1)
    assert got.message_id == sent.message_id
    assert _stored(acl_broker, "Secure") == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("ak", "sk", "why"), [
    ("writer", "not-the-secret", BAD_CREDENTIALS),
    ("", "", "credentials required"),
    ("nobody", "x", BAD_CREDENTIALS),
])
def test_wrong_or_missing_keys_are_unauthorized_and_nothing_is_stored(
        acl_broker: BrokerLiteServer, ak: str, sk: str, why: str) -> None:
    with ClientLog().installed() as log, \
            running(Producer(config(acl_broker.grpc, ak, sk), ("Secure",))) as producer, \
            pytest.raises(Exception, match="route"):
        producer.send(make_message("Secure", "smuggled"))
    assert f"{Code.UNAUTHORIZED}, {why}" in log.text()  # what the client was answered
    answer = _route(acl_broker, raw_metadata(ak=ak, sk=sk))
    assert answer.status.code == Code.UNAUTHORIZED and why in answer.status.message
    with raw_stub(acl_broker.grpc) as stub:
        message = definition_pb2.Message(
            topic=definition_pb2.Resource(name="Secure"), body=b"smuggled",
            system_properties=definition_pb2.SystemProperties(message_id="X1"))
        sent = stub.SendMessage(service_pb2.SendMessageRequest(messages=[message]),
                                metadata=raw_metadata(ak=ak, sk=sk), timeout=10)
    assert sent.status.code == Code.UNAUTHORIZED
    assert _stored(acl_broker, "Secure") == 0


@pytest.mark.timeout(60)
def test_missing_header_and_stale_date_are_unauthorized(acl_broker: BrokerLiteServer) -> None:
    bare = [(k, v) for k, v in raw_metadata(ak="writer", sk="w-secret") if k != "authorization"]
    answer = _route(acl_broker, bare)
    assert answer.status.code == Code.UNAUTHORIZED
    assert "no 'authorization' metadata" in answer.status.message
    answer = _route(acl_broker, raw_metadata(ak="writer", sk="w-secret",
                                             date_time="20200101T000000Z"))
    assert answer.status.code == Code.UNAUTHORIZED
    assert "away from the broker's clock" in answer.status.message


@pytest.mark.timeout(60)
def test_permissions_of_the_acl_apply(acl_broker: BrokerLiteServer) -> None:
    reader = config(acl_broker.grpc, "reader", "r-secret")
    with running(Producer(reader, ("Secure",))) as producer, \
            pytest.raises(UnauthorizedException, match="needs Pub on Topic:Secure"):
        producer.send(make_message("Secure", "not allowed"))
    writer = config(acl_broker.grpc, "writer", "w-secret")
    outsider = SimpleConsumer(writer, "outsiders", {"Secure": FilterExpression()},
                              await_duration=1)
    with running(outsider), pytest.raises(UnauthorizedException, match="Group:outsiders"):
        outsider.receive(1, 5)
    assert _stored(acl_broker, "Secure") == 0
