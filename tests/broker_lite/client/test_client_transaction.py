"""TransactionProducer against a real broker: commit, rollback, check-back, failures.

The ``broker`` fixture checks back halves older than 1 s every 0.5 s.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from broker_lite.client import (
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    ReceivedMessage,
    TransactionEnd,
    TransactionProducer,
)
from broker_lite.errors import (
    NoPermissionError,
    TransactionConflictError,
    TransactionNotFoundError,
)
from broker_lite.protocol import messages as m
from tests.broker_lite.client.client_support import StartBroker, drain
from tests.support import BrokerLiteServer, wait_until

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOW = LocalTransactionState.UNKNOW


class Listener:
    """Returns ``arg`` (or raises it) from the local transaction; ``check`` answers checks."""

    def __init__(self, check: LocalTransactionState = UNKNOW) -> None:
        self.check = check
        self.executed: list[tuple[Message, Any]] = []
        self.checked: list[ReceivedMessage] = []
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:
            self.executed.append((msg, arg))
        if isinstance(arg, Exception):
            raise arg
        return arg  # type: ignore[no-any-return]

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        with self._lock:
            self.checked.append(msg)
        return self.check


def _marker_then_drain(broker: BrokerLiteServer, topic: str) -> list[ReceivedMessage]:
    """Everything visible on ``topic``, read until a marker sent now shows up."""
    with Producer("marker", broker.native) as producer:
        marker = producer.send(Message(topic, b"marker"))
    with PullConsumer("cg", broker.native) as consumer:
        got = drain(consumer, topic, 0,
                    until=lambda got: any(m.msg_id == marker.msg_id for m in got))
    return [m for m in got if m.msg_id != marker.msg_id]


@pytest.mark.timeout(60)
def test_commit_is_consumed_with_its_transaction_id(broker: BrokerLiteServer) -> None:
    listener = Listener()
    with TransactionProducer("txg", listener, broker.native) as producer:
        result = producer.send_message_in_transaction(
            Message("Pay", "paid", tags="t", keys="order-1", delay_level=3), COMMIT)
    assert result.local_state is COMMIT and result.end_outcome == "committed"
    assert result.end_error is None and result.transaction_id
    [(seen, arg)] = listener.executed
    assert arg is COMMIT and seen.transaction_id == result.transaction_id
    assert seen.delay_level == 0 and seen.topic == "Pay"
    [got] = _marker_then_drain(broker, "Pay")
    assert got.body == b"paid" and got.keys == ("order-1",) and got.tags == "t"
    assert got.transaction_id == result.transaction_id == got.dedupe_key
    assert (got.queue_id, got.queue_offset) == (result.committed_queue_id,
                                                result.committed_queue_offset)
    assert "TRAN_MSG" not in got.properties and "REAL_TOPIC" not in got.properties


@pytest.mark.timeout(60)
def test_rollback_is_never_consumed(broker: BrokerLiteServer) -> None:
    with TransactionProducer("txg", Listener(), broker.native) as producer:
        result = producer.send_message_in_transaction(Message("Pay", "rolled back"), ROLLBACK)
        committed = producer.send_message_in_transaction(Message("Pay", "kept"), COMMIT)
    assert result.end_outcome == "rolled_back" and result.committed_queue_offset is None
    got = _marker_then_drain(broker, "Pay")
    assert [m.body for m in got] == [b"kept"]
    assert got[0].transaction_id == committed.transaction_id


@pytest.mark.timeout(60)
def test_unknown_is_resolved_by_check_back(broker: BrokerLiteServer) -> None:
    listener = Listener(check=COMMIT)
    with TransactionProducer("txg", listener, broker.native) as producer:
        result = producer.send_message_in_transaction(Message("Pay", "later"), UNKNOW)
        assert result.local_state is UNKNOW and result.end_outcome == "unknown"
        wait_until(lambda: listener.checked, timeout=20, message="no check-back came")
        [checked] = listener.checked[:1]
        assert checked.transaction_id == result.transaction_id
        assert checked.topic == "Pay" and checked.body == b"later" and checked.check_times >= 1
        with PullConsumer("cg", broker.native) as consumer:
            [got] = drain(consumer, "Pay", 1)
        assert got.transaction_id == result.transaction_id
        assert producer.checks_answered.get(COMMIT, 0) >= 1


@pytest.mark.timeout(60)
def test_listener_exception_counts_as_unknow_then_check_back_rolls_back(
        broker: BrokerLiteServer) -> None:
    listener = Listener(check=ROLLBACK)
    with TransactionProducer("txg", listener, broker.native) as producer:
        result = producer.send_message_in_transaction(Message("Pay", "boom"),
                                                      RuntimeError("db down"))
        assert result.local_state is UNKNOW and result.end_outcome == "unknown"
        none = producer.send_message_in_transaction(Message("Pay", "none"), None)
        assert none.local_state is UNKNOW
        wait_until(lambda: {m.transaction_id for m in listener.checked}
                   >= {result.transaction_id, none.transaction_id}, timeout=20)
    assert _marker_then_drain(broker, "Pay") == []


@pytest.mark.timeout(60)
def test_check_back_exception_counts_as_unknow_and_is_asked_again(
        broker: BrokerLiteServer) -> None:
    calls: list[str | None] = []

    class Flaky(Listener):
        def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
            calls.append(msg.transaction_id)
            if len(calls) == 1:
                raise RuntimeError("db briefly down")
            return COMMIT

    with TransactionProducer("txg", Flaky(), broker.native,
                             check_threads=(1, 2)) as producer:
        result = producer.send_message_in_transaction(Message("Pay", "x"), UNKNOW)
        wait_until(lambda: len(calls) >= 2, timeout=20, message="no second check-back")
    assert set(calls) == {result.transaction_id}
    [got] = _marker_then_drain(broker, "Pay")
    assert got.body == b"x"


@pytest.mark.timeout(60)
def test_failed_half_never_runs_the_local_transaction(start_broker: StartBroker) -> None:
    listener = Listener()
    with start_broker("--reject-transactions") as broker, \
            TransactionProducer("txg", listener, broker.native) as producer, \
            pytest.raises(NoPermissionError):
        producer.send_message_in_transaction(Message("Pay", "x"), COMMIT)
    assert listener.executed == []


@pytest.mark.timeout(60)
def test_async_transaction_producer_with_coroutine_listener(broker: BrokerLiteServer) -> None:
    class AsyncListener:
        async def execute_local_transaction(self, msg: Message,
                                            arg: Any) -> LocalTransactionState:
            return arg  # type: ignore[no-any-return]

        async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
            return COMMIT

    async def main() -> list[str]:
        async with AsyncTransactionProducer("txg", AsyncListener(), broker.native) as producer:
            results = await asyncio.gather(*(
                producer.send_message_in_transaction(Message("APay", f"m{i}"),
                                                     COMMIT if i % 2 == 0 else ROLLBACK)
                for i in range(20)))
        return [r.end_outcome or "" for r in results]

    outcomes = asyncio.run(main())
    assert outcomes == ["committed", "rolled_back"] * 10
    got = _marker_then_drain(broker, "APay")
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(0, 20, 2))


@pytest.mark.timeout(60)
def test_relay_style_half_then_resolve_is_idempotent(broker: BrokerLiteServer) -> None:
    with TransactionProducer("relay", Listener(), broker.native) as producer:
        half = producer.send_half(Message("Outbox", "row-1", msg_id="tx-0001"))
        again = producer.send_half(Message("Outbox", "row-1", msg_id="tx-0001"))
        assert half.transaction_id == again.transaction_id == "tx-0001"
        assert again.duplicate and not half.duplicate
        end = TransactionEnd("tx-0001", COMMIT, commit_log_offset=half.commit_log_offset,
                             queue_offset=half.queue_offset, msg_id=half.msg_id)
        first = producer.resolve_transaction(end)
        second = producer.resolve_transaction(end)
        assert first.outcome == second.outcome == "committed"
        assert not first.already and second.already
        with pytest.raises(TransactionConflictError):
            producer.resolve_transaction(TransactionEnd("tx-0001", ROLLBACK))
        other = producer.send_half(Message("Outbox", "row-2", msg_id="tx-0002"))
        results = producer.resolve_transactions([
            TransactionEnd(str(other.transaction_id), ROLLBACK),
            TransactionEnd("tx-unknown", COMMIT),
        ])
    assert isinstance(results[0], m.EndTransactionResponse)
    assert results[0].outcome == "rolled_back"
    assert isinstance(results[1], TransactionNotFoundError)
    got = _marker_then_drain(broker, "Outbox")
    assert [(g.body, g.transaction_id) for g in got] == [(b"row-1", "tx-0001")]


@pytest.mark.timeout(90)
def test_full_check_back_queue_answers_system_busy(broker: BrokerLiteServer) -> None:
    release = threading.Event()

    class Slow(Listener):
        def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
            super().check_local_transaction(msg)
            release.wait(30)
            return COMMIT

    listener = Slow()
    with TransactionProducer("txg", listener, broker.native, check_threads=(1, 1),
                             check_queue_size=1) as producer:
        pending = [producer.send_message_in_transaction(Message("Busy", f"m{i}"), UNKNOW)
                   for i in range(4)]
        # one check runs, one waits, the others are refused until the pool frees up
        wait_until(lambda: "SYSTEM_BUSY" in broker.stderr_text(), timeout=20,
                   message="the broker never saw a SYSTEM_BUSY answer")
        release.set()
        with PullConsumer("cg", broker.native) as consumer:
            got = drain(consumer, "Busy", 4, timeout=30)
    assert sorted(g.transaction_id or "" for g in got) == sorted(
        p.transaction_id for p in pending)
