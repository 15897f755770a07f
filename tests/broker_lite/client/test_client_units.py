"""Client pieces that need no broker: messages, states, config, the check-back pool."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime

import pytest

import broker_lite.client as client
from broker_lite.client import (
    ClientConfig,
    LocalTransactionState,
    Message,
    ReceivedMessage,
)
from broker_lite.client.auth import hello_request
from broker_lite.client.thread_pool import BoundedThreadPool, PoolFullError
from broker_lite.errors import BrokerBusyError, ResponseCode
from broker_lite.protocol import messages as m
from broker_lite.protocol.signing import sign_hello


@pytest.mark.timeout(10)
def test_public_names_are_exported() -> None:
    for name in client.__all__:
        assert hasattr(client, name), name
    assert client.MessageView is ReceivedMessage


@pytest.mark.timeout(10)
def test_message_normalises_body_keys_and_delay() -> None:
    msg = Message("Orders", "héllo", tags="new", keys="k1 k2", properties={"a": "b"},
                  message_group="customer-7", deliver_at=datetime(2030, 1, 1, tzinfo=UTC))
    assert msg.body == "héllo".encode()
    assert msg.keys == ("k1", "k2")
    assert msg.sharding_key == msg.message_group == "customer-7"
    assert msg.deliver_at_ms == 1893456000000
    wire = msg.to_wire()
    assert wire.topic == "Orders" and wire.keys == ["k1", "k2"] and wire.queue_id == -1
    assert wire.sharding_key == "customer-7" and not wire.transactional
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.topic = "x"  # type: ignore[misc]


@pytest.mark.timeout(10)
def test_half_strips_any_delay() -> None:
    msg = Message("T", b"x", delay_level=3, properties={"DELAY": "3", "k": "v"})
    half = msg.to_wire(transactional=True)
    assert half.transactional and half.delay_level == 0 and half.deliver_at_ms == 0
    assert half.properties == {"k": "v"}


@pytest.mark.parametrize("bad", [
    {"topic": ""}, {"delay_level": 19}, {"keys": ["has space"]},
    {"properties": {"k": 1}}, {"deliver_at": datetime(2030, 1, 1)},
])
@pytest.mark.timeout(10)
def test_message_refuses_bad_fields(bad: dict[str, object]) -> None:
    args: dict[str, object] = {"topic": "T", "body": b"x", **bad}
    with pytest.raises(ValueError):
        Message(**args)  # type: ignore[arg-type]


@pytest.mark.timeout(10)
def test_retried_message_shows_its_original_topic() -> None:
    wire = m.DeliveredMessage(
        msg_id="ID1", topic="%RETRY%billing", queue_id=0, queue_offset=5, commit_log_offset=9,
        body=b"b", properties={"RETRY_TOPIC": "Orders", "__transactionId__": "tx-1",
                               "UNIQ_KEY": "ID1"}, reconsume_times=2)
    msg = ReceivedMessage.from_wire(wire)
    assert msg.topic == "Orders" and msg.delivered_topic == "%RETRY%billing"
    assert msg.is_retry and msg.reconsume_times == 2
    assert msg.transaction_id == msg.dedupe_key == "tx-1"
    plain = ReceivedMessage.from_wire(m.DeliveredMessage(
        msg_id="ID2", topic="Orders", queue_id=1, queue_offset=0, commit_log_offset=0,
        body=b"", properties={"UNIQ_KEY": "ID2"}))
    assert plain.transaction_id is None and plain.dedupe_key == "ID2" and not plain.is_retry


@pytest.mark.timeout(10)
def test_local_transaction_states() -> None:
    assert LocalTransactionState.UNKNOWN is LocalTransactionState.UNKNOW
    assert LocalTransactionState.COMMIT_MESSAGE.tx_state == m.TxState.COMMIT == 8
    assert LocalTransactionState.ROLLBACK_MESSAGE.tx_state == 12
    assert LocalTransactionState.UNKNOW.tx_state == 0
    assert LocalTransactionState.coerce(None, what="t") is LocalTransactionState.UNKNOW
    assert LocalTransactionState.coerce("COMMIT", what="t") is LocalTransactionState.UNKNOW
    assert (LocalTransactionState.coerce(m.TxState.ROLLBACK, what="t")
            is LocalTransactionState.ROLLBACK_MESSAGE)


@pytest.mark.timeout(10)
def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        ClientConfig(server="localhost")
    with pytest.raises(ValueError, match="together"):
        ClientConfig(access_key="ak")
    with pytest.raises(ValueError, match="request_timeout"):
        ClientConfig(request_timeout=0)
    assert ClientConfig(server="[::1]:10911").address == ("::1", 10911)


@pytest.mark.timeout(10)
def test_hello_signature_matches_the_brokers_formula() -> None:
    hello = hello_request("client-1", "ak", "secret")
    assert hello.access_key == "ak" and hello.nonce and hello.timestamp_ms > 0
    assert hello.signature == sign_hello("secret", "client-1", hello.timestamp_ms, hello.nonce)
    assert hello_request("client-1", None, None).signature == ""


@pytest.mark.timeout(10)
def test_check_pool_refuses_past_its_queue_as_system_busy() -> None:
    pool = BoundedThreadPool(min_threads=1, max_threads=2, queue_size=2, name="t")
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold() -> bool:
        started.release()
        return release.wait(5)

    try:
        running = [pool.submit(hold) for _ in range(2)]
        for _ in running:  # both threads are busy now
            assert started.acquire(timeout=5)
        queued = [pool.submit(lambda: 1) for _ in range(2)]
        assert pool.threads == 2
        with pytest.raises(PoolFullError) as info:
            pool.submit(lambda: 1)
        assert isinstance(info.value, BrokerBusyError)
        assert info.value.code == ResponseCode.SYSTEM_BUSY and info.value.retriable
        release.set()
        assert [f.result(5) for f in running] == [True, True]
        assert [f.result(5) for f in queued] == [1, 1]
    finally:
        release.set()
        pool.shutdown(wait=True, timeout=5)
    assert pool.threads == 0
