"""Bad requests get the Status code the official client expects, change nothing, and
never stop the door from serving everyone else.

The requests go through a bare stub (the client validates most of them
before sending), signed like the client's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import Code
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.client import Admin
from tests.broker_lite.grpc_door.grpc_support import (
    FAST_GRPC_BROKER,
    config,
    make_message,
    raw_metadata,
    raw_stub,
    receive,
    running,
)
from tests.support import BrokerLiteServer, start_broker_lite

pytestmark = pytest.mark.grpc


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerLiteServer]:
    """Topics are not auto-created, bodies over 1 KiB are refused; topic Good exists."""
    data = tmp_path_factory.mktemp("strict") / "broker"
    flags = [*FAST_GRPC_BROKER, "--no-auto-create-topics", "--max-message-size", "1K"]
    with start_broker_lite(data, flags) as server:
        with Admin(server.native) as admin:
            admin.create_topic("Good", queues=2)
        yield server


def _message(topic: str = "Good", body: bytes = b"x", **system: Any) -> Any:
    system.setdefault("message_id", "01ABCDEF")
    user = system.pop("user", {})
    return pb.Message(topic=pb.Resource(name=topic), body=body, user_properties=user,
                      system_properties=pb.SystemProperties(**system))


def _send(server: BrokerLiteServer, *messages: Any) -> Any:
    with raw_stub(server.grpc) as stub:
        return stub.SendMessage(spb.SendMessageRequest(messages=list(messages)),
                                metadata=raw_metadata(), timeout=10)


SEND_CASES = {
    "no message": ((), Code.MESSAGE_CORRUPTED),
    "bad topic name": ((_message("bad topic!"),), Code.ILLEGAL_TOPIC),
    "system topic": ((_message("RMQ_SYS_TRANS_HALF_TOPIC"),), Code.ILLEGAL_TOPIC),
    "unknown topic": ((_message("Missing"),), Code.TOPIC_NOT_FOUND),
    "body over the limit": ((_message(body=b"x" * 1025),), Code.MESSAGE_BODY_TOO_LARGE),
    "empty body": ((_message(body=b""),), Code.MESSAGE_BODY_EMPTY),
    "system property": ((_message(user={"UNIQ_KEY": "mine"}),),
                        Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "control character": ((_message(user={"k": "a\x01b"}),), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
    "no message id": ((_message(message_id=""),), Code.ILLEGAL_MESSAGE_ID),
    "tag with a bar": ((_message(tag="a|b"),), Code.ILLEGAL_MESSAGE_TAG),
    "key with a space": ((_message(keys=["two words"]),), Code.ILLEGAL_MESSAGE_KEY),
    "transactional FIFO": ((_message(message_type=pb.MessageType.TRANSACTION,
                                     message_group="g"),),
                           Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
    "lite topic": ((_message(lite_topic="lt"),), Code.UNSUPPORTED),
    "two topics": ((_message(), _message("Other")), Code.MESSAGE_CORRUPTED),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", SEND_CASES)
def test_refused_sends_store_nothing(strict_broker: BrokerLiteServer, case: str) -> None:
    messages, code = SEND_CASES[case]
    answer = _send(strict_broker, *messages)
    assert answer.status.code == code, answer.status.message
    assert answer.status.message
    with Admin(strict_broker.native) as admin:
        topics = {t.topic: sum(t.max_offsets) for t in admin.list_topics()}
    assert topics["Good"] == 0 and "Missing" not in topics


def _receive(server: BrokerLiteServer, **fields: Any) -> list[Any]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=fields.pop("group", "readers")),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="Good"), id=-1), batch_size=8,
        **fields)
    with raw_stub(server.grpc) as stub:
        return list(stub.ReceiveMessage(request, metadata=raw_metadata(), timeout=10))


@pytest.mark.timeout(60)
def test_consumer_requests_get_their_codes(strict_broker: BrokerLiteServer) -> None:
    sql = pb.FilterExpression(type=pb.FilterType.SQL, expression="a > 1")
    cases: list[tuple[dict[str, Any], int]] = [
        ({"filter_expression": sql, "auto_renew": True}, Code.ILLEGAL_FILTER_EXPRESSION),
        ({}, Code.ILLEGAL_INVISIBLE_TIME),  # no invisible duration, no auto-renew
        ({"group": "bad group", "auto_renew": True}, Code.ILLEGAL_CONSUMER_GROUP),
    ]
    for fields, code in cases:
        responses = _receive(strict_broker, **fields)
        assert responses[0].status.code == code, (fields, responses[0].status)
        assert responses[-1].HasField("delivery_timestamp")
    with raw_stub(strict_broker.grpc) as stub:
        ack = stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name="readers"), topic=pb.Resource(name="Good"),
            entries=[spb.AckMessageEntry(message_id="M", receipt_handle="forged")]),
            metadata=raw_metadata(), timeout=10)
        end = stub.EndTransaction(spb.EndTransactionRequest(
            topic=pb.Resource(name="Good"), transaction_id="never-sent",
            resolution=pb.TransactionResolution.COMMIT), metadata=raw_metadata(), timeout=10)
        beat = stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER),
                              metadata=raw_metadata(), timeout=10)
        recall = stub.RecallMessage(spb.RecallMessageRequest(
            topic=pb.Resource(name="Good"), recall_handle="h"), metadata=raw_metadata(),
            timeout=10)
    assert ack.status.code == Code.INVALID_RECEIPT_HANDLE
    assert ack.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    assert end.status.code == Code.INVALID_TRANSACTION_ID
    assert beat.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
    assert recall.status.code == Code.UNSUPPORTED


@pytest.mark.timeout(60)
def test_garbage_bytes_are_refused_and_everyone_else_is_served(
        strict_broker: BrokerLiteServer) -> None:
    cfg = config(strict_broker.grpc)
    consumer = SimpleConsumer(cfg, "steady", {"Good": FilterExpression()}, await_duration=1)
    with running(Producer(cfg, ("Good",))) as producer, running(consumer):
        with grpc.insecure_channel(strict_broker.grpc) as channel:
            for method in ("SendMessage", "QueryRoute", "AckMessage"):
                call = channel.unary_unary(f"/apache.rocketmq.v2.MessagingService/{method}")
                with pytest.raises(grpc.RpcError) as info:
                    call(b"\xff\xfe not a protobuf \x00", metadata=raw_metadata(), timeout=10)
                # grpc itself refuses it: the servicer never sees an undecodable request
                assert info.value.code() == grpc.StatusCode.UNKNOWN
                assert "Error parsing message" in (info.value.details() or "")
        sent = producer.send(make_message("Good", "still served"))
        (got,) = receive(consumer, 1)
    assert got.message_id == sent.message_id
