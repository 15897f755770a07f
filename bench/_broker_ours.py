"""bench/broker.py's ``ours`` side: the workloads broker_lite's client puts on the broker.

:class:`BrokerSend` (``send_batch`` or ``send``), :class:`BrokerTx` (the
batch forms the outbox relay uses, or ``send_message_in_transaction``) and
:class:`BrokerConsume` (``AsyncPullConsumer.pull``, one reader per queue),
and :func:`preload_broker`, which stores what the consume cases read.
"""

from __future__ import annotations

import asyncio
from typing import Any

from _broker_cases import (
    BATCH,
    BATCH_WINDOW,
    BODY,
    BODY_SIZE,
    GROUP,
    QUEUES,
    REQUEST_TIMEOUT,
    CaseSpec,
    chunk,
    requests_for,
)
from _common import windowed

from broker_lite.client import (
    AsyncProducer,
    AsyncPullConsumer,
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    ReceivedMessage,
    TransactionEnd,
)
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m

__all__ = ["BrokerConsume", "BrokerSend", "BrokerTx", "preload_broker"]


#: ``(access key, secret key)`` a workload signs with (``bench/broker.py --acl``)
Keys = tuple[str | None, str | None]


class _Commit:
    """A local transaction that commits at once (the benchmark's listener)."""

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


class BrokerSend:
    """``send_batch`` (per_request > 1) or ``send`` with ``window`` requests in flight."""

    def __init__(self, address: str, spec: CaseSpec, topic: str, *,
                 keys: Keys = (None, None)) -> None:
        self.spec = spec
        self.producer = AsyncProducer(GROUP, address, timeout=REQUEST_TIMEOUT,
                                      access_key=keys[0], secret_key=keys[1])
        self.message = Message(topic, BODY)
        self.stored = 0

    async def open(self) -> None:
        await self.producer.start()
        await self.producer.send(self.message)  # warm up: the topic exists, the path is hot

    async def load(self) -> None:
        spec, producer, message = self.spec, self.producer, self.message

        async def one(index: int) -> None:
            if spec.per_request == 1:
                await producer.send(message)
                self.stored += 1
            else:
                n = chunk(index, spec.count, spec.per_request)
                results = await producer.send_batch([message] * n)
                self.stored += len(results)  # not "+= len(await ...)": that reads first

        await windowed(requests_for(spec.count, spec.per_request), spec.window, one)

    async def verify(self) -> None:
        if self.stored != self.spec.count:
            raise RuntimeError(f"broker stored {self.stored} of {self.spec.count} messages")

    async def close(self) -> None:
        await self.producer.shutdown()


class BrokerTx:
    """Half + commit per transaction: the batch forms, or ``send_message_in_transaction``."""

    def __init__(self, address: str, spec: CaseSpec, topic: str, *,
                 keys: Keys = (None, None)) -> None:
        self.spec = spec
        self.producer = AsyncTransactionProducer(GROUP, _Commit(), address,
                                                 timeout=REQUEST_TIMEOUT,
                                                 access_key=keys[0], secret_key=keys[1])
        self.message = Message(topic, BODY)
        self.committed = 0

    async def open(self) -> None:
        await self.producer.start()
        await self.producer.send_message_in_transaction(self.message)  # warm up

    async def load(self) -> None:
        spec = self.spec
        one = self._single if spec.per_request == 1 else self._batch
        await windowed(requests_for(spec.count, spec.per_request), spec.window, one)

    async def _single(self, index: int) -> None:
        sent = await self.producer.send_message_in_transaction(self.message)
        if sent.end_outcome != "committed":
            raise RuntimeError(f"transaction {sent.transaction_id} ended {sent.end_outcome}: "
                               f"{sent.end_error}")
        self.committed += 1

    async def _batch(self, index: int) -> None:
        """What the outbox relay does: SEND_BATCH of halves, then END_TRANSACTION_BATCH."""
        n = chunk(index, self.spec.count, self.spec.per_request)
        producer = self.producer
        halves = await producer.session.request(
            RequestCode.SEND_BATCH,
            m.SendBatchRequest(producer_group=producer.group,
                               messages=[self.message.to_wire(transactional=True)
                                         for _ in range(n)]),
            m.SendBatchResponse)
        ends: list[TransactionEnd] = []
        for item in halves.results:
            half = item.result
            if half is None:
                raise RuntimeError(f"half refused: code {item.code} {item.error}")
            ends.append(TransactionEnd(half.transaction_id or half.msg_id,
                                       LocalTransactionState.COMMIT_MESSAGE,
                                       half.commit_log_offset, half.queue_offset, half.msg_id))
        for outcome in await producer.resolve_transactions(ends):
            if not isinstance(outcome, m.EndTransactionResponse) or (
                    outcome.outcome != "committed"):
                raise RuntimeError(f"end-transaction answered {outcome!r}")
            self.committed += 1

    async def verify(self) -> None:
        if self.committed != self.spec.count:
            raise RuntimeError(f"broker committed {self.committed} of {self.spec.count}")

    async def close(self) -> None:
        await self.producer.shutdown()


class BrokerConsume:
    """One reader per queue, ``per_request`` messages per pull, from offset 0."""

    def __init__(self, address: str, spec: CaseSpec, topic: str) -> None:
        self.spec = spec
        self.topic = topic
        self.consumer = AsyncPullConsumer(f"{GROUP}-consume", address, timeout=REQUEST_TIMEOUT)
        self.read = 0
        self.bytes = 0

    async def open(self) -> None:
        await self.consumer.start()
        await self.consumer.pull(self.topic, 0, 0, 1)  # warm up

    async def load(self) -> None:
        per_queue = self.spec.count // QUEUES
        consumer, topic, size = self.consumer, self.topic, self.spec.per_request

        async def reader(queue_id: int) -> None:
            offset = got = 0
            while got < per_queue:
                result = await consumer.pull(topic, queue_id, offset, min(size, per_queue - got))
                if not result.messages:
                    raise RuntimeError(f"queue {queue_id}: {result.status} at {offset}")
                got += len(result.messages)
                self.bytes += sum(len(msg.body) for msg in result.messages)
                offset = result.next_offset
            self.read += got

        await asyncio.gather(*(reader(q) for q in range(QUEUES)))

    async def verify(self) -> None:
        if self.read != self.spec.count or self.bytes != self.spec.count * BODY_SIZE:
            raise RuntimeError(f"broker read {self.read} of {self.spec.count} messages")

    async def close(self) -> None:
        await self.consumer.shutdown()


async def preload_broker(address: str, topic: str, count: int) -> None:
    """``count`` messages on ``topic``, spread evenly over its queues (round robin)."""
    async with AsyncProducer(GROUP, address, timeout=REQUEST_TIMEOUT) as producer:
        message = Message(topic, BODY)

        async def one(index: int) -> None:
            await producer.send_batch([message] * chunk(index, count, BATCH))

        await windowed(requests_for(count, BATCH), BATCH_WINDOW, one)
