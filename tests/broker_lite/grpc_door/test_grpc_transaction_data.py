"""The proxy mode's transaction data table and hand-off, on a real Broker: no server, no waiting.

The clock is the test's, so the window passes when the test says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_lite.core import Broker, BrokerConfig, model
from broker_lite.grpc_door import GrpcDoorConfig, GrpcDoorError
from broker_lite.grpc_door.proxy_mode import ProxyMode, message_type
from broker_lite.grpc_door.status import Code
from broker_lite.grpc_door.transaction_data import TransactionDataTable
from broker_lite.storage import StoreConfig
from tests.broker_lite.grpc_door.grpc_support import Clock

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(30)]


def _table(clock: Clock, max_per_key: int = 15) -> TransactionDataTable:
    return TransactionDataTable(expire_seconds=30.0, max_per_key=max_per_key, clock=clock)


def test_an_entry_is_taken_once_and_only_within_its_window() -> None:
    clock = Clock()
    table = _table(clock)
    table.add("T", "tx-1", commit_log_offset=100, queue_offset=1)
    taken = table.poll("T", "tx-1")
    assert taken is not None and (taken.commit_log_offset, taken.queue_offset) == (100, 1)
    assert table.poll("T", "tx-1") is None  # used up
    table.add("T", "tx-2", commit_log_offset=200, queue_offset=2)
    assert table.poll("U", "tx-2") is None  # the key is topic@transactionId
    clock.now += 30.001
    assert table.poll("T", "tx-2") is None and len(table) == 0  # past the window


def test_the_newest_entry_goes_first_and_the_oldest_is_dropped_past_the_limit() -> None:
    clock = Clock()
    table = _table(clock, max_per_key=2)
    for offset in (100, 200, 300):  # the half, then two check-backs
        table.add("T", "tx", commit_log_offset=offset, queue_offset=offset // 100)
        clock.now += 1
    assert [d.commit_log_offset for d in (table.poll("T", "tx"), table.poll("T", "tx"))
            if d is not None] == [300, 200]
    assert table.poll("T", "tx") is None


def test_expire_drops_only_what_is_past_its_window() -> None:
    clock = Clock()
    table = _table(clock)
    table.add("T", "old", commit_log_offset=1, queue_offset=1)
    clock.now += 20
    table.add("T", "new", commit_log_offset=2, queue_offset=2)
    clock.now += 15
    assert table.expire() == 1 and len(table) == 1
    assert table.poll("T", "new") is not None


def test_message_type_follows_rocketmqs_order() -> None:
    base = {"topic": "T", "body": b"x"}
    assert message_type(model.Message(**base, transactional=True)) == "TRANSACTION"
    assert message_type(model.Message(**base, deliver_at_ms=5)) == "DELAY"
    assert message_type(model.Message(**base, sharding_key="g")) == "FIFO"
    assert message_type(model.Message(**base)) == "NORMAL"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(BrokerConfig(store=StoreConfig(data_dir=tmp_path / "b", segment_size=1 << 20)))
    b.create_topic(model.NewTopic(topic="Pay", queues=1,
                                  attributes={"message.type": "TRANSACTION"}))
    yield b
    b.close()


def test_an_end_is_answered_before_the_broker_applies_it_and_a_refusal_is_only_logged(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    proxy = ProxyMode(broker, GrpcDoorConfig(proxy_semantics=True))
    wire = model.Message(topic="Pay", body=b"row", msg_id="tx-1", keys=["row-1"],
                         transactional=True)
    proxy.check_send("Pay", [wire])
    sent = broker.send("Pay", wire, dedupe=False).result
    proxy.half_stored("Pay", wire, sent)
    data = proxy.take("Pay", "tx-1")
    with pytest.raises(GrpcDoorError) as again:
        proxy.take("Pay", "tx-1")
    assert again.value.code == Code.INTERNAL_SERVER_ERROR
    assert "cannot found transaction data" in again.value.message

    def end(state: int) -> model.EndRequest:
        return model.EndRequest(producer_group="Pay", transaction_id="tx-1", state=state,
                                       commit_log_offset=data.commit_log_offset,
                                       queue_offset=data.queue_offset)

    async def scenario() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        proxy.hand_off(loop, end(model.TxState.COMMIT))
        before = broker.transactions.halves("tx-1")[0].state  # handed off, not applied yet
        proxy.hand_off(loop, end(model.TxState.ROLLBACK))  # a conflicting end: refused later
        turn = loop.create_future()  # queued after the hand-offs: they run first
        loop.call_soon(turn.set_result, None)
        await turn
        return before, broker.transactions.halves("tx-1")[0].state

    with caplog.at_level(logging.WARNING, logger="broker_lite.grpc"):
        assert asyncio.run(scenario()) == ("pending", "committed")
    assert any("not applied" in r.getMessage() for r in caplog.records)


def test_a_check_back_names_the_renewed_copy_and_its_answer_ends_the_half_once(
        broker: Broker) -> None:
    """RocketMQ checks (and keeps transaction data for) the copy it just put back."""
    proxy = ProxyMode(broker, GrpcDoorConfig(proxy_semantics=True))
    sent = broker.send("Pay", model.Message(topic="Pay", body=b"row", msg_id="tx-2",
                                            transactional=True), dedupe=False).result
    endpoint = _Endpoint()
    broker.register(model.ClientRegistration(client_id="c", producer_groups=["Pay"]), endpoint)
    entry = broker.transactions.get("tx-2")
    assert entry is not None and broker.transactions.check(entry.store_ts + 60_000) == 1
    shown = proxy.check_sent(endpoint.checks[0])
    renewed = max(entry.copies)
    assert renewed != sent.commit_log_offset
    assert (shown.message.commit_log_offset, shown.message.queue_offset) == (
        renewed, entry.copies[renewed])
    data = proxy.take("Pay", "tx-2")
    assert (data.commit_log_offset, data.queue_offset) == (renewed, entry.copies[renewed])
    broker.end_transaction(model.EndRequest(
        producer_group="Pay", transaction_id="tx-2", state=model.TxState.COMMIT, from_check=True,
        commit_log_offset=data.commit_log_offset, queue_offset=data.queue_offset))
    assert entry.state == "committed"
    with pytest.raises(GrpcDoorError):
        proxy.take("Pay", "tx-2")


class _Endpoint:
    """A producer's channel as the core sees it; keeps the checks it is sent."""

    client_id = "c"
    remote_address = "127.0.0.1:1"

    def __init__(self) -> None:
        self.checks: list[model.CheckRequest] = []

    def is_alive(self) -> bool:
        return True

    def send_check(self, request: model.CheckRequest) -> None:
        self.checks.append(request)


def test_the_topic_type_is_enforced_except_on_mixed_retry_and_dlq_topics(broker: Broker) -> None:
    proxy = ProxyMode(broker, GrpcDoorConfig(proxy_semantics=True))
    half = model.Message(topic="Pay", body=b"x", transactional=True)
    normal = model.Message(topic="Pay", body=b"x")
    with pytest.raises(GrpcDoorError) as wrong:
        proxy.check_send("Pay", [normal])
    assert wrong.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    with pytest.raises(GrpcDoorError) as batch:
        proxy.check_send("Pay", [half, half])
    assert batch.value.code == Code.INTERNAL_SERVER_ERROR
    broker.create_topic(model.NewTopic(topic="Any", queues=1,
                                       attributes={"message.type": "MIXED"}))
    proxy.check_send("Any", [half])
    proxy.check_send("Any", [normal])
    proxy.check_send("%RETRY%group", [normal])
    with pytest.raises(GrpcDoorError):
        proxy.check_send("Unknown", [half])  # a topic without the attribute is NORMAL
