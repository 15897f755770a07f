"""The client's batch API for relays: ``send_halves`` and ``end_transactions``, one outcome each.

A relay connects under a group of its own and sends halves and ends under
the outbox's group; every item gets its own result or the broker's error.
"""

from __future__ import annotations

import asyncio

import pytest

from broker_lite.client import (
    AsyncProducer,
    LocalTransactionState,
    Message,
    PullConsumer,
    SendResult,
    TransactionEnd,
    TransactionEndResult,
)
from broker_lite.errors import (
    BrokerError,
    MessageTooLargeError,
    TransactionConflictError,
    TransactionNotFoundError,
)
from tests.broker_lite.client.client_support import StartBroker, drain

COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE


@pytest.mark.timeout(90)
def test_halves_and_ends_in_one_request_each_answer_per_item(start_broker: StartBroker) -> None:
    with start_broker("--max-message-size", "4K") as broker:
        async def main() -> tuple[list[SendResult | BrokerError],
                                  list[TransactionEndResult | BrokerError],
                                  list[TransactionEndResult | BrokerError]]:
            async with AsyncProducer("outbox-relay", broker.native) as producer:
                halves = await producer.send_halves([
                    Message("Batched", b"one", msg_id="tx-1"),
                    Message("Batched", b"x" * 8192, msg_id="tx-2"),
                    Message("Batched", b"three", msg_id="tx-3"),
                ], group="outbox")
                ends = [TransactionEnd("tx-1", COMMIT), TransactionEnd("tx-3", ROLLBACK),
                        TransactionEnd("tx-unknown", COMMIT)]
                first = await producer.end_transactions(ends, group="outbox")
                again = await producer.end_transactions(
                    [ends[0], TransactionEnd("tx-3", COMMIT)], group="outbox")
                await producer.send(Message("Batched", b"marker"))  # everything before is in
                return halves, first, again

        halves, first, again = asyncio.run(main())
        assert [type(h) for h in halves] == [SendResult, MessageTooLargeError, SendResult]
        one, three = halves[0], halves[2]
        assert isinstance(one, SendResult) and isinstance(three, SendResult)
        assert (one.transaction_id, three.transaction_id) == ("tx-1", "tx-3")
        committed, rolled_back, unknown = first
        assert isinstance(committed, TransactionEndResult)
        assert committed.outcome == "committed" and committed.commit_log_offset >= 0
        assert isinstance(rolled_back, TransactionEndResult)
        assert rolled_back.outcome == "rolled_back" and rolled_back.commit_log_offset == -1
        assert isinstance(unknown, TransactionNotFoundError)
        repeated, flipped = again
        assert isinstance(repeated, TransactionEndResult) and repeated.already
        assert repeated.commit_log_offset == committed.commit_log_offset
        assert isinstance(flipped, TransactionConflictError)
        with PullConsumer("cg", broker.native) as consumer:
            got = drain(consumer, "Batched", 3,
                        until=lambda ms: any(g.body == b"marker" for g in ms))
        assert sorted(g.body for g in got) == [b"marker", b"one"]


@pytest.mark.timeout(60)
def test_empty_batches_send_nothing(start_broker: StartBroker) -> None:
    with start_broker() as broker:
        async def main() -> tuple[list[SendResult | BrokerError],
                                  list[TransactionEndResult | BrokerError]]:
            async with AsyncProducer("outbox-relay", broker.native) as producer:
                return await producer.send_halves([]), await producer.end_transactions([])

        assert asyncio.run(main()) == ([], [])
