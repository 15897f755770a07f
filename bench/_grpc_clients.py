"""bench/grpc_door.py's clients: the native one, a bare gRPC one, and the official Producer.

Each case has a native and a gRPC function with the same signature
(server, topic, count, requests in flight) returning the seconds its load
took: send, transaction (half then COMMIT) and consume with acks
(:data:`NATIVE`, :data:`GRPC`). :class:`GrpcClient` sends what the official
client sends on a ``grpc.aio`` channel; :func:`official_send` drives the
official ``rocketmq-python-client`` Producer with W sends in flight.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from _common import windowed
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import Code, service_pb2_grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.client import (
    AsyncProducer,
    AsyncPushConsumer,
    AsyncTransactionProducer,
    ConsumeResult,
    LocalTransactionState,
    ReceivedMessage,
)
from broker_lite.client import Message as NativeMessage

__all__ = [
    "BODY",
    "CASES",
    "GRPC",
    "NATIVE",
    "GrpcClient",
    "drive",
    "grpc_consume",
    "grpc_send",
    "grpc_tx",
    "native_consume",
    "native_send",
    "native_tx",
    "official_send",
    "prefill",
]

BODY = b"x" * 128


async def drive(count: int, concurrency: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """``concurrency`` workers call ``one(i)`` for i in range(count); returns seconds."""
    t0 = time.perf_counter()
    await windowed(count, concurrency, one)
    return time.perf_counter() - t0


class _Commit:
    async def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


async def native_send(server: str, topic: str, count: int, concurrency: int) -> float:
    msg = NativeMessage(topic, BODY, tags="bench")
    async with AsyncProducer("bench-native", server) as producer:
        await producer.send(msg)
        return await drive(count, concurrency, lambda i: producer.send(msg))


async def native_tx(server: str, topic: str, count: int, concurrency: int) -> float:
    msg = NativeMessage(topic, BODY, tags="bench")
    async with AsyncTransactionProducer("bench-native-tx", _Commit(), server) as producer:

        async def one(i: int) -> None:
            sent = await producer.send_message_in_transaction(msg)
            if sent.end_error is not None:
                raise sent.end_error

        return await drive(count, concurrency, one)


async def native_consume(server: str, topic: str, count: int, concurrency: int) -> float:
    done = 0
    all_in = asyncio.Event()

    async def on_message(msg: ReceivedMessage) -> ConsumeResult:
        nonlocal done
        done += 1
        if done >= count:
            all_in.set()
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(f"bench-{uuid.uuid4().hex[:10]}", server, listener=on_message,
                                 consume_threads=concurrency, pull_batch_size=32,
                                 long_poll_ms=5_000)
    consumer.subscribe(topic)
    t0 = time.perf_counter()
    await consumer.start()
    try:
        await asyncio.wait_for(all_in.wait(), 120)
        return time.perf_counter() - t0
    finally:
        await consumer.shutdown()


class GrpcClient:
    """A bare ``grpc.aio`` client sending what the official client sends."""

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.aio.insecure_channel(endpoint)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.client_id = f"bench@{os.getpid()}@{uuid.uuid4().hex[:8]}"
        self.prefix = uuid.uuid4().hex[:16].upper()

    def metadata(self) -> list[tuple[str, str]]:
        return [("x-mq-client-id", self.client_id), ("x-mq-language", "PYTHON"),
                ("x-mq-protocol", "GRPC_V2"), ("x-mq-request-id", uuid.uuid4().hex)]

    def message(self, topic: str, i: int, kind: int = pb.MessageType.NORMAL) -> Any:
        props = pb.SystemProperties(message_id=f"{self.prefix}{i:016X}", tag="bench",
                                    message_type=kind, born_host="127.0.0.1",
                                    body_encoding=pb.Encoding.IDENTITY)
        props.born_timestamp.FromMilliseconds(int(time.time() * 1000))
        return pb.Message(topic=pb.Resource(name=topic), body=BODY, system_properties=props)

    async def send(self, topic: str, i: int, kind: int = pb.MessageType.NORMAL) -> Any:
        response = await self.stub.SendMessage(
            spb.SendMessageRequest(messages=[self.message(topic, i, kind)]),
            metadata=self.metadata(), timeout=10)
        if response.status.code != Code.OK:
            raise RuntimeError(f"send failed: {response.status}")
        return response.entries[0]

    async def close(self) -> None:
        await self.channel.close()


async def grpc_send(endpoint: str, topic: str, count: int, concurrency: int) -> float:
    client = GrpcClient(endpoint)
    try:
        await client.send(topic, count)  # warm up: the topic exists, the path is hot
        return await drive(count, concurrency, lambda i: client.send(topic, i))
    finally:
        await client.close()


async def grpc_tx(endpoint: str, topic: str, count: int, concurrency: int) -> float:
    client = GrpcClient(endpoint)

    async def one(i: int) -> None:
        entry = await client.send(topic, i, pb.MessageType.TRANSACTION)
        ended = await client.stub.EndTransaction(spb.EndTransactionRequest(
            topic=pb.Resource(name=topic), message_id=entry.message_id,
            transaction_id=entry.transaction_id, resolution=pb.TransactionResolution.COMMIT,
            source=pb.TransactionSource.SOURCE_CLIENT), metadata=client.metadata(), timeout=10)
        if ended.status.code != Code.OK:
            raise RuntimeError(f"end transaction failed: {ended.status}")

    try:
        return await drive(count, concurrency, one)
    finally:
        await client.close()


async def grpc_consume(endpoint: str, topic: str, count: int, concurrency: int) -> float:
    client = GrpcClient(endpoint)
    group = pb.Resource(name=f"bench-{uuid.uuid4().hex[:10]}")
    resource = pb.Resource(name=topic)
    acked = 0
    slots = asyncio.Semaphore(concurrency)

    async def ack(message: Any) -> None:
        nonlocal acked
        async with slots:
            response = await client.stub.AckMessage(spb.AckMessageRequest(
                group=group, topic=resource, entries=[spb.AckMessageEntry(
                    message_id=message.system_properties.message_id,
                    receipt_handle=message.system_properties.receipt_handle)]),
                metadata=client.metadata(), timeout=10)
            if response.status.code != Code.OK:
                raise RuntimeError(f"ack failed: {response.status}")
            acked += 1

    async def receiver(queue_id: int) -> None:
        request = spb.ReceiveMessageRequest(
            group=group, message_queue=pb.MessageQueue(topic=resource, id=queue_id),
            batch_size=32, auto_renew=False)
        request.invisible_duration.FromSeconds(60)
        request.long_polling_timeout.FromSeconds(2)
        while acked < count:
            messages = [r.message async for r in client.stub.ReceiveMessage(
                request, metadata=client.metadata(), timeout=10) if r.HasField("message")]
            await asyncio.gather(*(ack(m) for m in messages))

    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.gather(*(receiver(q) for q in range(4))), 120)
        return time.perf_counter() - t0
    finally:
        await client.close()


def official_send(endpoint: str, topic: str, count: int, window: int) -> float:
    """The official Producer's ``send_async`` with ``window`` sends in flight."""
    producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        message = Message()
        message.topic, message.body, message.tag = topic, BODY, "bench"
        producer.send(message)
        slots = threading.Semaphore(window)
        finished = threading.Event()
        errors: list[BaseException] = []
        left = count

        def done(future: Any) -> None:
            nonlocal left
            if future.exception() is not None:
                errors.append(future.exception())
            slots.release()
            with lock:
                left -= 1
                if left == 0:
                    finished.set()

        lock = threading.Lock()
        t0 = time.perf_counter()
        for _ in range(count):
            slots.acquire()
            producer.send_async(message).add_done_callback(done)
        finished.wait(300)
        elapsed = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"{len(errors)} official sends failed: {errors[0]}")
        return elapsed
    finally:
        producer.shutdown()


CASES = ("send", "tx", "consume")
NATIVE = {"send": native_send, "tx": native_tx, "consume": native_consume}
GRPC = {"send": grpc_send, "tx": grpc_tx, "consume": grpc_consume}


async def prefill(server: str, topic: str, count: int) -> None:
    msg = NativeMessage(topic, BODY, tags="bench")
    async with AsyncProducer("bench-prefill", server) as producer:
        await drive(count, 64, lambda i: producer.send(msg))
