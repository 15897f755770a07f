"""bench/relay.py's ``peer`` side: faststream-outbox's relay, producer and Redis stream consumer.

The relay is a FastStream outbox subscriber stacked under a ``RedisBroker``
stream publisher, in its own process, started and stopped by lines on its
stdin (:func:`peer_relay`); the producer writes rows with
``OutboxBroker.publish(..., session=session)`` on asyncpg; the consumer
reads the stream with ``XREAD BLOCK``. :class:`PeerConfig` holds the
subscriber settings tried.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from _relay_common import (
    BACKLOG_TX,
    PEER_QUEUE,
    PEER_TABLE,
    Env,
    Seen,
    body,
    child,
    freeze_heap,
    wait_ready,
)

__all__ = [
    "MISSING_EXTRA",
    "PEER_PACKAGES",
    "PeerConfig",
    "consume_peer",
    "peer_producer",
    "peer_relay",
    "peer_relay_main",
    "require_peer",
]

PEER_PACKAGES = ("faststream-outbox", "faststream", "asyncpg")


MISSING_EXTRA = ("bench/relay.py runs faststream-outbox as its peer, which is not importable "
                 "here ({error}). Install the 'bench' extra: .venv/bin/pip install -e "
                 "'.[bench]' (make venv does it).")


def require_peer() -> None:
    try:
        # asyncpg ships neither type hints nor a py.typed marker
        import asyncpg  # type: ignore[import-untyped]  # noqa: F401
        import faststream.redis  # noqa: F401
        import faststream_outbox  # noqa: F401
    except ImportError as exc:
        raise SystemExit(MISSING_EXTRA.format(error=exc)) from exc


@dataclass(frozen=True, slots=True)
class PeerConfig:
    """The faststream-outbox subscriber knobs tried (``W/B/F`` on the command line)."""

    max_workers: int = 1
    fetch_batch_size: int = 10
    terminal_flush_batch_size: int = 1
    min_fetch_interval: float = 1.0
    max_fetch_interval: float = 10.0

    @property
    def label(self) -> str:
        return f"{self.max_workers}/{self.fetch_batch_size}/{self.terminal_flush_batch_size}"

    @classmethod
    def parse(cls, text: str) -> PeerConfig:
        w, b, f = (int(x) for x in text.split("/"))
        return cls(max_workers=w, fetch_batch_size=b, terminal_flush_batch_size=f)


async def peer_relay_main(args: argparse.Namespace) -> int:
    """faststream-outbox's relay: an outbox subscriber stacked under a Redis stream publisher.

    Ready once Redis is connected; the outbox broker (fetch loop, workers,
    LISTEN) starts when a line arrives on stdin, and stops at the next line.
    """
    from faststream.redis import RedisBroker
    from faststream_outbox import OutboxBroker, make_outbox_table
    from sqlalchemy import MetaData
    from sqlalchemy.ext.asyncio import create_async_engine

    cfg = PeerConfig(max_workers=args.max_workers, fetch_batch_size=args.fetch_batch,
                     terminal_flush_batch_size=args.flush_batch,
                     min_fetch_interval=args.min_interval, max_fetch_interval=args.max_interval)
    engine = create_async_engine(args.db, pool_size=cfg.max_workers + 2, max_overflow=4)
    table = make_outbox_table(MetaData(), table_name=PEER_TABLE)
    outbox = OutboxBroker(engine, outbox_table=table, logger=None)
    # faststream documents logger=None as "no logging", but its RedisBrokerParams types
    # the logger as LoggerProto only
    redis_broker = RedisBroker(args.redis, logger=None)  # type: ignore[arg-type]
    stream_name: str = args.stream  # typed, so that publisher() picks its stream overload
    stream = redis_broker.publisher(stream=stream_name)

    @stream
    @outbox.subscriber(PEER_QUEUE, max_workers=cfg.max_workers,
                       fetch_batch_size=cfg.fetch_batch_size,
                       terminal_flush_batch_size=cfg.terminal_flush_batch_size,
                       min_fetch_interval=cfg.min_fetch_interval,
                       max_fetch_interval=cfg.max_fetch_interval,
                       lease_ttl_seconds=max(60.0, 3 * cfg.max_fetch_interval))
    async def relay(message: dict[str, Any]) -> dict[str, Any]:
        return message

    loop = asyncio.get_running_loop()
    await redis_broker.connect()
    freeze_heap()
    Path(args.ready).write_text("ready", encoding="utf-8")
    await loop.run_in_executor(None, sys.stdin.readline)
    await outbox.start()
    await loop.run_in_executor(None, sys.stdin.readline)
    await outbox.stop()
    await redis_broker.stop()
    await engine.dispose()
    return 0


async def peer_producer(args: argparse.Namespace) -> list[tuple[int, float]]:
    from faststream_outbox import OutboxBroker, make_outbox_table
    from sqlalchemy import MetaData
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

    engine = create_async_engine(args.db)
    table = make_outbox_table(MetaData(), table_name=PEER_TABLE)
    broker = OutboxBroker(engine, outbox_table=table, logger=None)
    await broker.connect()
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    stamps: list[tuple[int, float]] = []
    if args.mode == "backlog":
        for start in range(0, args.count, BACKLOG_TX):
            async with sessions() as session, session.begin():
                for i in range(start, min(args.count, start + BACKLOG_TX)):
                    await broker.publish(body(i), queue=PEER_QUEUE, session=session)
    else:
        freeze_heap()
        begin = time.monotonic()
        for i in range(args.count):
            delay = begin + i / args.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            async with sessions() as session, session.begin():
                await broker.publish(body(i), queue=PEER_QUEUE, session=session)
            stamps.append((i, time.monotonic()))
    await broker.stop()
    await engine.dispose()
    return stamps


async def consume_peer(redis_url: str, stream: str, seen: Seen, stop: asyncio.Event,
                       ready: asyncio.Event) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    last = "0-0"
    try:
        ready.set()
        while not stop.is_set():
            # the RESP2 reply this client gets, [[stream, [(id, {field: value})]]]; redis-py
            # types it as the union of its RESP2 and RESP3 shapes
            answer = cast("list[list[Any]] | None",
                          await client.xread({stream: last}, count=1000, block=500))
            for _name, entries in answer or []:
                seen.add([b"".join(v for v in fields.values()) for _id, fields in entries])
                last = entries[-1][0]
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def peer_relay(env: Env, cfg: PeerConfig, stream: str) -> Any:
    ready = env.work / f"peer-ready-{uuid.uuid4().hex[:8]}"
    proc = child("peer-relay", "--db", env.db_async, "--redis", env.redis, "--stream", stream,
                 "--ready", str(ready), "--max-workers", str(cfg.max_workers),
                 "--fetch-batch", str(cfg.fetch_batch_size),
                 "--flush-batch", str(cfg.terminal_flush_batch_size),
                 "--min-interval", str(cfg.min_fetch_interval),
                 "--max-interval", str(cfg.max_fetch_interval),
                 env=env, stdin=subprocess.PIPE, log_name="peer-relay.log")
    stdin = proc.popen.stdin if proc.popen is not None else None
    assert stdin is not None
    try:
        await wait_ready(ready, proc)

        def go() -> None:
            stdin.write(b"go\n")
            stdin.flush()

        yield go
        with contextlib.suppress(BrokenPipeError):
            stdin.write(b"stop\n")
            stdin.close()
        await asyncio.to_thread(proc.wait, 30)
    finally:
        proc.stop(timeout=20)
