"""bench/broker.py's Redis side: the same workloads as Redis Streams commands, on redis-py.

:class:`RedisSend` (pipelined ``XADD``, or one per request),
:class:`RedisTx` (the half to a pending stream, then ``MULTI`` with the
message and a marker naming the half, ``EXEC``) and :class:`RedisConsume`
(``XREAD COUNT K``, one reader per stream), and :func:`preload_redis`,
which stores what the consume cases read.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis
import redis.asyncio as aioredis
from _broker_cases import (
    BATCH,
    BODY_SIZE,
    FIELDS,
    QUEUES,
    REQUEST_TIMEOUT,
    CaseSpec,
    chunk,
    requests_for,
)
from _common import windowed

__all__ = ["RedisConsume", "RedisSend", "RedisTx", "consume_streams", "preload_redis"]


class _RedisSide:
    def __init__(self, port: int, spec: CaseSpec, key: str) -> None:
        self.spec = spec
        self.key = key
        self.client = aioredis.Redis(host="127.0.0.1", port=port,
                                     socket_timeout=REQUEST_TIMEOUT)

    async def open(self) -> None:
        # one pooled connection per request in flight, made before the clock starts
        await asyncio.gather(*(self.client.ping() for _ in range(self.spec.window)))

    def keys(self) -> list[str]:
        return [self.key]

    async def load(self) -> None:
        raise NotImplementedError

    async def verify(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        with contextlib.suppress(redis.exceptions.RedisError):
            await self.client.delete(*self.keys())
        await self.client.aclose()


class RedisSend(_RedisSide):
    """Pipelines of ``XADD`` (per_request > 1), or one ``XADD`` per request."""

    async def load(self) -> None:
        spec, client, key = self.spec, self.client, self.key

        async def one(index: int) -> None:
            if spec.per_request == 1:
                await client.xadd(key, FIELDS)
                return
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(chunk(index, spec.count, spec.per_request)):
                    pipe.xadd(key, FIELDS)
                await pipe.execute()

        await windowed(requests_for(spec.count, spec.per_request), spec.window, one)

    async def verify(self) -> None:
        stored = await self.client.xlen(self.key)
        if stored != self.spec.count:
            raise RuntimeError(f"redis stored {stored} of {self.spec.count} messages")


def _op_fields(half_id: Any) -> dict[Any, Any]:
    return {b"half": half_id}


class RedisTx(_RedisSide):
    """The two steps: XADD the half to a pending stream; then MULTI, XADD the message to the
    visible stream and a marker naming the half to an op stream, EXEC."""

    def keys(self) -> list[str]:
        return [self.key, f"{self.key}:half", f"{self.key}:op"]

    async def load(self) -> None:
        spec, client = self.spec, self.client
        visible, half_key, op_key = self.keys()

        async def single(index: int) -> None:
            half_id = await client.xadd(half_key, FIELDS)
            async with client.pipeline(transaction=True) as pipe:
                pipe.xadd(visible, FIELDS)
                pipe.xadd(op_key, _op_fields(half_id))
                await pipe.execute()

        async def batch(index: int) -> None:
            n = chunk(index, spec.count, spec.per_request)
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(n):
                    pipe.xadd(half_key, FIELDS)
                half_ids = await pipe.execute()
            async with client.pipeline(transaction=True) as pipe:
                for half_id in half_ids:
                    pipe.xadd(visible, FIELDS)
                    pipe.xadd(op_key, _op_fields(half_id))
                await pipe.execute()

        await windowed(requests_for(spec.count, spec.per_request), spec.window,
                       single if spec.per_request == 1 else batch)

    async def verify(self) -> None:
        counts = [await self.client.xlen(k) for k in self.keys()]
        if counts != [self.spec.count] * 3:
            raise RuntimeError(f"redis stream lengths {counts}, want {self.spec.count} each")


class RedisConsume(_RedisSide):
    """One reader per stream, ``XREAD COUNT per_request`` from the last id read."""

    def __init__(self, port: int, spec: CaseSpec, key: str) -> None:
        super().__init__(port, spec, key)
        self.read = 0
        self.bytes = 0

    async def load(self) -> None:
        per_stream = self.spec.count // QUEUES
        client, size = self.client, self.spec.per_request

        async def reader(stream: str) -> None:
            last: bytes | str = "0-0"
            got = 0
            while got < per_stream:
                answer: Any = await client.xread({stream: last},
                                                 count=min(size, per_stream - got))
                entries = answer[0][1] if answer else []
                if not entries:
                    raise RuntimeError(f"{stream}: nothing after {last!r}")
                got += len(entries)
                self.bytes += sum(len(fields[b"body"]) for _id, fields in entries)
                last = entries[-1][0]
            self.read += got

        await asyncio.gather(*(reader(s) for s in consume_streams(self.key)))

    async def verify(self) -> None:
        if self.read != self.spec.count or self.bytes != self.spec.count * BODY_SIZE:
            raise RuntimeError(f"redis read {self.read} of {self.spec.count} messages")

    async def close(self) -> None:  # the preloaded streams serve every repetition
        await self.client.aclose()


def consume_streams(key: str) -> list[str]:
    return [f"{key}:{q}" for q in range(QUEUES)]


async def preload_redis(port: int, key: str, count: int) -> None:
    client = aioredis.Redis(host="127.0.0.1", port=port, socket_timeout=REQUEST_TIMEOUT)
    try:
        streams = consume_streams(key)
        await client.delete(*streams)
        for start in range(0, count, BATCH * QUEUES):
            async with client.pipeline(transaction=False) as pipe:
                for i in range(start, min(count, start + BATCH * QUEUES)):
                    pipe.xadd(streams[i % QUEUES], FIELDS)
                await pipe.execute()
    finally:
        await client.aclose()
