"""Issue 27's authorization attacks on the gRPC door (the official RocketMQ 5 client's),
each failing, while the owner's legitimate flow (send, consume, transaction with
check-back) goes on with the official client in the same test.
"""

from __future__ import annotations

from typing import Any

import pytest
from rocketmq import FilterExpression, Producer, SimpleConsumer, TransactionResolution
from rocketmq.grpc_protocol import Code
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from tests.broker_lite.grpc_door.grpc_support import (
    Checker,
    config,
    make_message,
    raw_metadata,
    raw_stub,
    receive,
    running,
)
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.grpc

SECRETS = {"app": "app-secret", "inv": "inv-secret", "alice": "alice-secret",
           "bob": "bob-secret"}


def _meta(account: str, client_id: str | None = None) -> list[tuple[str, str]]:
    return raw_metadata(client_id or f"{account}-raw", account, SECRETS[account])


def _inventory(server: BrokerLiteServer) -> SimpleConsumer:
    return SimpleConsumer(config(server.grpc, "inv", SECRETS["inv"]), "inventory",
                          {"Orders": FilterExpression()}, await_duration=1)


def _receive_raw(server: BrokerLiteServer, account: str, group: str, topic: str
                 ) -> tuple[int, list[bytes]]:
    """One ReceiveMessage as ``account``: its status code and the bodies it carried."""
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1), batch_size=8,
        auto_renew=True)
    with raw_stub(server.grpc) as stub:
        answers = list(stub.ReceiveMessage(request, metadata=_meta(account), timeout=10))
    codes = [a.status.code for a in answers if a.HasField("status")]
    return codes[0], [a.message.body for a in answers if a.HasField("message")]


@pytest.mark.timeout(180)
def test_grpc_dead_letters_are_read_only_by_their_group(tenants: Any) -> None:
    server = tenants.server
    app = config(server.grpc, "app", SECRETS["app"])
    with running(Producer(app, ("Orders",))) as producer, running(_inventory(server)) as inv:
        sent = producer.send(make_message("Orders", b"SECRET-ORDER card=4111", keys=["o-7"]))
        (got,) = receive(inv, 1, ack=False)
        assert got.message_id == sent.message_id
        with raw_stub(server.grpc) as stub:
            dlq = stub.ForwardMessageToDeadLetterQueue(spb.ForwardMessageToDeadLetterQueueRequest(
                group=pb.Resource(name="inventory"), topic=pb.Resource(name="Orders"),
                receipt_handle=got.receipt_handle, message_id=got.message_id,
                delivery_attempt=1, max_delivery_attempts=3),
                metadata=_meta("inv"), timeout=10)
        assert dlq.status.code == Code.OK, dlq.status
    wait_until(lambda: tenants.stored("%DLQ%inventory") == 1, timeout=20,
               message="the dead letter was never stored")
    for thief in ("alice", "bob"):
        for group in (thief, "inventory"):
            code, bodies = _receive_raw(server, thief, group, "%DLQ%inventory")
            assert code == Code.UNAUTHORIZED and bodies == []
    with raw_stub(server.grpc) as stub:
        forged = pb.Message(topic=pb.Resource(name="%RETRY%inventory"), body=b"FAKE",
                            system_properties=pb.SystemProperties(message_id="F1"),
                            user_properties={"RETRY_TOPIC": "Orders"})
        answer = stub.SendMessage(spb.SendMessageRequest(messages=[forged]),
                                  metadata=_meta("alice"), timeout=10)
    assert answer.status.code == Code.UNAUTHORIZED
    assert tenants.stored("%RETRY%inventory") == 0
    # the owner reads its own dead letter
    code, bodies = _receive_raw(server, "inv", "inventory", "%DLQ%inventory")
    assert code == Code.OK and bodies == [b"SECRET-ORDER card=4111"]


@pytest.mark.timeout(180)
def test_grpc_check_backs_and_ends_stay_with_the_producer(tenants: Any) -> None:
    server = tenants.server
    # alice may not say she produces to Orders: her settings are refused
    settings = pb.Settings(client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(
        topics=[pb.Resource(name="Orders")]))
    with raw_stub(server.grpc) as stub:
        answers = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]),
                                 metadata=_meta("alice"), timeout=10)
        first = next(iter(answers))
    assert first.status.code == Code.UNAUTHORIZED, first.status
    checker = Checker(TransactionResolution.COMMIT)
    app = config(server.grpc, "app", SECRETS["app"])
    with running(Producer(app, ("Orders",), checker=checker)) as producer, \
            running(_inventory(server)) as inv:
        kept = producer.begin_transaction()
        receipt = producer.send(make_message("Orders", "kept"), kept)
        # alice cannot end it, either way, with the id she learned
        for resolution in (pb.TransactionResolution.ROLLBACK, pb.TransactionResolution.COMMIT):
            with raw_stub(server.grpc) as stub:
                end = stub.EndTransaction(spb.EndTransactionRequest(
                    topic=pb.Resource(name="Orders"), transaction_id=receipt.transaction_id,
                    message_id=receipt.message_id, resolution=resolution),
                    metadata=_meta("alice"), timeout=10)
            assert end.status.code == Code.UNAUTHORIZED, end.status
        # left open, the half is checked back on app's stream; its checker commits
        wait_until(checker.count, timeout=30, message="app's checker was never asked")
        got = receive(inv, 1)
        assert [x.message_id for x in got] == [receipt.message_id]
        # app's own transactions end as app says
        dropped = producer.begin_transaction()
        producer.send(make_message("Orders", "dropped"), dropped)
        dropped.rollback()
        assert inv.receive(16, 3) == []


@pytest.mark.timeout(180)
def test_grpc_client_ids_are_bound_to_their_account(tenants: Any) -> None:
    server = tenants.server
    with running(_inventory(server)) as inv:
        victim = inv.client_id
        with raw_stub(server.grpc) as stub:
            gone = stub.NotifyClientTermination(
                spb.NotifyClientTerminationRequest(group=pb.Resource(name="inventory")),
                metadata=_meta("alice", victim), timeout=10)
            assert gone.status.code == Code.UNAUTHORIZED, gone.status
            beat = stub.Heartbeat(spb.HeartbeatRequest(
                client_type=pb.ClientType.SIMPLE_CONSUMER, group=pb.Resource(name="alice")),
                metadata=_meta("alice", victim), timeout=10)
            assert beat.status.code == Code.UNAUTHORIZED, beat.status
            # the victim's own heartbeat still works
            mine = stub.Heartbeat(spb.HeartbeatRequest(
                client_type=pb.ClientType.SIMPLE_CONSUMER, group=pb.Resource(name="inventory")),
                metadata=_meta("inv", victim), timeout=10)
            assert mine.status.code == Code.OK, mine.status
        with tenants.wire("app") as app:
            app.send("Orders", b"still served", group="rocketbox", queue_id=0)
        assert [x.body for x in receive(inv, 1)] == [b"still served"]
    with tenants.wire("root") as root:
        clients = root.call(RequestCode.CONSUMER_GROUPS, m.Empty()).clients
    assert victim not in {c.client_id for c in clients}  # its own goodbye worked


@pytest.mark.timeout(120)
def test_grpc_no_topic_or_group_flood(tenants: Any) -> None:
    server = tenants.server
    before = tenants.topics()
    with raw_stub(server.grpc) as stub:
        for i in range(3):
            message = pb.Message(topic=pb.Resource(name=f"%RETRY%flood{i:04d}"), body=b"x",
                                 system_properties=pb.SystemProperties(message_id=f"F{i}"))
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[message]),
                                    metadata=_meta("bob"), timeout=10)
            assert sent.status.code == Code.UNAUTHORIZED, sent.status
            code, _bodies = _receive_raw(server, "bob", f"flood{i:04d}", "A")
            assert code == Code.UNAUTHORIZED
    # bob's own group reads A
    code, _bodies = _receive_raw(server, "bob", "bob", "A")
    assert code in (Code.OK, Code.MESSAGE_NOT_FOUND)
    assert tenants.topics() == before
