"""Reconnect: clients outlive a broker restart on the same port and data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_lite.client import (
    BrokerUnavailableError,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    TransactionProducer,
)
from tests.broker_lite.client.client_support import FAST_BROKER, Recorder
from tests.support import free_port, start_broker_lite, wait_until


class CommitOnCheck:
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


@pytest.mark.timeout(120)
def test_clients_reconnect_after_broker_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    args = [*FAST_BROKER, "--port", str(free_port())]
    recorder = Recorder()
    with start_broker_lite(data_dir, args) as first:
        producer = Producer("pg", first.native, timeout=10.0)
        tx = TransactionProducer("txg", CommitOnCheck(), first.native, timeout=10.0)
        consumer = PushConsumer("cg", first.native, listener=recorder, rebalance_interval=0.3,
                                long_poll_ms=20_000)
        consumer.subscribe("Restart")
        for client in (producer, tx, consumer):
            client.start()
        producer.send(Message("Restart", "before"))
        wait_until(lambda: b"before" in recorder.bodies(), timeout=15)
    try:
        # the broker is down: requests wait for a connection, then fail retriably
        with pytest.raises(BrokerUnavailableError) as info:
            producer.send(Message("Restart", "while down"), timeout=0.5)
        assert info.value.retriable
        with start_broker_lite(data_dir, args) as second:
            assert second.native == first.native
            producer.send(Message("Restart", "after"))
            wait_until(lambda: b"after" in recorder.bodies(), timeout=20)
            # the transaction producer registered again: check-back reaches it
            pending = tx.send_message_in_transaction(Message("Restart", "checked"))
            assert pending.end_outcome == "unknown"
            wait_until(lambda: b"checked" in recorder.bodies(), timeout=20)
    finally:
        for client in (producer, tx, consumer):
            client.shutdown()
    assert recorder.bodies().count(b"before") == 1
