"""Relay benchmark: committed outbox rows to consumer-visible messages, ours and a peer's.

Usage::

    .venv/bin/python bench/relay.py [--rows N] [--repeat K] [--rate R] [--seconds S]
                                    [--peer-configs W/B/F,...] [--quick]

Both sides relay rows of a PostgreSQL outbox table to a broker a consumer
reads, on one private PostgreSQL cluster (separate tables), with the same
bodies (JSON of 256 bytes carrying a sequence number ``i``):

* **ours**: the application writes rows with ``outbox.publish.publish`` in a
  SQLAlchemy session (psycopg); a Celery worker (``outbox.celery.run_worker``,
  threads pool, Redis as Celery's broker, one process) relays them to
  broker_lite with ``BrokerLitePublisher`` (halves, then end-transaction). The
  consumer long-polls the topic's queues with ``AsyncPullConsumer``.
* **peer**: faststream-outbox 0.19.0. The application writes rows with
  ``OutboxBroker.publish(..., session=session)`` in an async SQLAlchemy session
  (asyncpg, so ``pg_notify`` wakes the relay); the relay is a FastStream
  subscriber on its outbox table, stacked under a ``RedisBroker`` stream
  publisher, in one process. The consumer reads the stream with ``XREAD BLOCK``.

Two measurements, each repeated, ours and the peer back to back, the order
flipping every repetition:

* **throughput**: N rows are committed while the relay is idle (ours: no
  ``on_commit`` hook, as if Celery's broker had been down; peer: the relay
  process is started but its broker is not). The clock starts when the relay
  is told to go (ours: one ``rocketbox.sweep`` task is enqueued, which is what
  beat does every few seconds; peer: ``OutboxBroker.start()``) and stops when
  the consumer has seen the last of the N messages. Rate = N / that time.
  Duplicates and missing messages are counted (missing must be 0).
* **latency**: a producer process commits ``--rate`` transactions per second
  (one message each, paced on a schedule) for ``--seconds`` while the relay
  runs. Commit-to-visible = when the consumer (this process) received the
  message minus when the producer's DB commit returned, both
  ``time.monotonic()`` (one clock for all processes on Linux). Ours takes the
  commit time in an ``after_commit`` listener that runs before the outbox's
  own hook (which coalesces commits into ``rocketbox.relay`` tasks, one per
  ``enqueue_window`` at most), so the enqueue counts as latency. The first
  second of the stream is a warm-up and is not counted. Every process calls
  ``gc.freeze()`` once set up (ours in the product, the harness for the rest).

Full runs write ``bench/results/relay.json`` and the section of
``bench/README.md`` between the ``relay`` markers; ``--quick`` only prints.
The peer needs the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    TMP_DIR,
    Samples,
    add_repository_paths,
    describe_machine,
    git_state,
    load_average,
    machine_summary,
    median,
    settle,
    update_readme_section,
    utc_now,
    write_json,
)
from _relay_rocketmq import (
    PROXY_FLAGS,
    consume_rocketmq,
    create_tx_topic,
    other_redis_db,
    ratio_of_pairs,
)

add_repository_paths()

from procgroup import Process  # noqa: E402

BODY_SIZE = 256
ID_RE = re.compile(rb'"i":\s*(\d+)')
PRODUCER_GROUP = "relaybench"
PEER_TABLE = "peer_outbox"
PEER_QUEUE = "bench"
#: rows per transaction when the throughput backlog is written (not timed)
BACKLOG_TX = 100
READY_TIMEOUT = 60.0
TARGET_RATIO = 2.0
TARGET_P99_MS = 50.0
PEER_PACKAGES = ("faststream-outbox", "faststream", "asyncpg")
#: who can be measured: our relay to broker_lite, ours to a RocketMQ 5 proxy, the peer
SIDES = ("ours", "rocketmq", "peer")
#: the side combinations a full run saves, and where
SAVED_SIDES = {frozenset({"ours", "peer"}): "relay", frozenset(SIDES): "relay",
               frozenset({"ours", "rocketmq"}): "relay-rocketmq"}
MISSING_EXTRA = ("bench/relay.py runs faststream-outbox as its peer, which is not importable "
                 "here ({error}). Install the 'bench' extra: .venv/bin/pip install -e "
                 "'.[bench]' (make venv does it).")

log = logging.getLogger("bench.relay")


def body(i: int) -> dict[str, Any]:
    """A JSON body of BODY_SIZE bytes (compact encoding) carrying the sequence number."""
    head = len(json.dumps({"i": i, "pad": ""}, separators=(",", ":")))
    return {"i": i, "pad": "x" * max(0, BODY_SIZE - head)}


def require_peer() -> None:
    try:
        import asyncpg  # noqa: F401
        import faststream.redis  # noqa: F401
        import faststream_outbox  # noqa: F401
    except ImportError as exc:
        raise SystemExit(MISSING_EXTRA.format(error=exc)) from exc


def versions() -> dict[str, str]:
    out = {}
    for name in (*PEER_PACKAGES, "celery", "sqlalchemy", "psycopg", "redis"):
        with contextlib.suppress(importlib_metadata.PackageNotFoundError):
            out[name] = importlib_metadata.version(name)
    return out


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


# -- child processes ------------------------------------------------------------------


def ours_relay_main(args: argparse.Namespace) -> int:
    """The relay worker, as ``rocketbox relay`` runs it (beat off: the bench enqueues sweeps)."""
    from celery.signals import worker_ready
    from sqlalchemy import create_engine

    from outbox import Outbox, RelaySettings
    from outbox.celery import run_worker

    engine = create_engine(args.db, pool_size=args.concurrency + 2)
    outbox = Outbox(engine=engine, broker=args.broker, producer_group=PRODUCER_GROUP,
                    relay=RelaySettings(batch_size=args.batch_size,
                                        drain_lanes=args.drain_lanes))

    def ready(**_kwargs: object) -> None:
        Path(args.ready).write_text("ready", encoding="utf-8")

    worker_ready.connect(ready, weak=False)
    return run_worker(outbox, celery_broker=args.redis, celery_backend=None,
                      concurrency=args.concurrency, beat=False, loglevel="WARNING",
                      checker=False,
                      settings=_celery_settings())


#: --enqueue-window reaches the producer and worker children through this variable
ENQUEUE_WINDOW_ENV = "ROCKETBOX_BENCH_ENQUEUE_WINDOW"


def _celery_settings() -> Any:
    from outbox.celery import CelerySettings

    # no beat schedule: the benchmark enqueues the sweep itself; one sweep drains any backlog
    window = os.environ.get(ENQUEUE_WINDOW_ENV)
    extra = {"enqueue_window": float(window)} if window else {}
    return CelerySettings(sweep_interval=0, sweep_passes=1_000_000, **extra)


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
    redis_broker = RedisBroker(args.redis, logger=None)
    stream = redis_broker.publisher(stream=args.stream)

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


def ours_producer(args: argparse.Namespace) -> list[tuple[int, float]]:
    from sqlalchemy import create_engine, event
    from sqlalchemy.orm import Session, sessionmaker

    from outbox import Outbox
    from outbox.celery import celery_on_commit, make_celery
    from outbox.publish import publish

    engine = create_engine(args.db)
    outbox = Outbox(engine=engine, broker=args.broker, producer_group=PRODUCER_GROUP)
    if args.mode == "paced":
        app = make_celery(outbox, broker_url=args.redis, settings=_celery_settings())
        outbox = dataclasses.replace(outbox, on_commit=celery_on_commit(app))
        app.connection_for_write().ensure_connection()
    sessions = sessionmaker(engine)
    stamps: list[tuple[int, float]] = []
    if args.mode == "backlog":
        for start in range(0, args.count, BACKLOG_TX):
            with sessions.begin() as session:
                for i in range(start, min(args.count, start + BACKLOG_TX)):
                    publish(session, args.topic, body(i), outbox=outbox)
        return stamps
    committed: list[float] = []

    def stamp(_session: Session) -> None:
        committed.append(time.monotonic())

    for i in _paced(args.count, args.rate):
        session = sessions()
        # registered before publish() adds the outbox's own hook: it runs first
        event.listen(session, "after_commit", stamp)
        with session, session.begin():
            publish(session, args.topic, body(i), outbox=outbox)
        stamps.append((i, committed[-1]))
    return stamps


def freeze_heap() -> None:
    """Take what a harness process has set up out of the collector's view.

    Full collections walking every module and client object paused these
    processes for 40-110 ms every few seconds, which showed up as latency of
    whichever side was running. Our own long-running processes do this
    themselves (``broker-lite serve``, the rocketbox Celery worker); the
    harness does it for the producers, the peer's relay and the consumers,
    so neither side is measured with the other's or the harness's pauses.
    """
    gc.collect()
    gc.freeze()


def _paced(count: int, rate: float) -> Iterator[int]:
    """Yield 0..count-1 on a fixed schedule of ``rate`` per second (no catch-up bursts
    beyond what is late: a late item goes at once)."""
    freeze_heap()
    start = time.monotonic()
    for i in range(count):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield i


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


def producer_main(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    stamps = ours_producer(args) if args.side != "peer" else asyncio.run(peer_producer(args))
    elapsed = time.monotonic() - t0
    Path(args.out).write_text(json.dumps({"stamps": stamps, "seconds": elapsed}),
                              encoding="utf-8")
    return 0


# -- consumers (in this process) -----------------------------------------------------------


@dataclass
class Seen:
    """What a consumer received: first receipt time per ``i``, and duplicates."""

    times: dict[int, float] = field(default_factory=dict)
    duplicates: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, bodies: Sequence[bytes]) -> None:
        now = time.monotonic()
        for raw in bodies:
            match = ID_RE.search(raw)
            if match is None:
                raise RuntimeError(f"message without an id: {raw[:80]!r}")
            i = int(match.group(1))
            if i in self.times:
                self.duplicates += 1
            else:
                self.times[i] = now
        self.changed.set()

    async def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.times) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        return True


async def consume_ours(broker: str, topic: str, seen: Seen, stop: asyncio.Event,
                       ready: asyncio.Event) -> None:
    from broker_lite.client import AsyncAdmin, AsyncPullConsumer

    async with AsyncAdmin(broker) as admin:
        info = await admin.create_topic(topic)
    queues = info.queues
    consumer = AsyncPullConsumer(f"{PRODUCER_GROUP}-consumer", broker)
    await consumer.start()

    async def one(queue_id: int) -> None:
        offset = 0
        while not stop.is_set():
            result = await consumer.pull(topic, queue_id, offset, 256, long_poll_ms=500)
            if result.messages:
                seen.add([msg.body for msg in result.messages])
            offset = result.next_offset

    try:
        tasks = [asyncio.create_task(one(q)) for q in range(queues)]
        ready.set()
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await consumer.shutdown()


async def consume_peer(redis_url: str, stream: str, seen: Seen, stop: asyncio.Event,
                       ready: asyncio.Event) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    last = "0-0"
    try:
        ready.set()
        while not stop.is_set():
            answer = await client.xread({stream: last}, count=1000, block=500)
            for _name, entries in answer or []:
                seen.add([b"".join(v for v in fields.values()) for _id, fields in entries])
                last = entries[-1][0]
    finally:
        await client.aclose()


# -- the runs ---------------------------------------------------------------------------------


@dataclass
class Env:
    db: str  # psycopg URL
    db_async: str  # asyncpg URL
    redis: str
    broker: str
    work: Path
    celery_app: Any = None
    ours_worker: Process | None = None
    #: the rocketmq side: broker_lite in proxy mode (native admin port, gRPC door), its
    #: Celery queue (another Redis database), app and worker
    proxy_native: str = ""
    proxy_grpc: str = ""
    rocketmq_redis: str = ""
    rocketmq_app: Any = None
    rocketmq_worker: Process | None = None

    def relay_of(self, side: str) -> tuple[str, str]:
        """(broker address, Celery broker URL) of our relay on ``side``."""
        if side == "rocketmq":
            return f"rocketmq://{self.proxy_grpc}", self.rocketmq_redis
        return self.broker, self.redis


def _child(role: str, *extra: str, env: Env, stdin: int = subprocess.DEVNULL,
           log_name: str) -> Process:
    argv = [sys.executable, __file__, "--role", role, *extra]
    return Process(argv, log=env.work / log_name, stdin=stdin, name=role,
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).start()


async def _wait_ready(path: Path, proc: Process) -> None:
    """Until the child wrote ``path`` (its ready file); raises if it exits or times out."""
    await asyncio.to_thread(proc.wait_until, path.exists, READY_TIMEOUT,
                            what=f"{path.name} written", interval=0.02)


async def run_producer(env: Env, side: str, mode: str, count: int, *, topic: str = "",
                       rate: float = 0.0) -> dict[str, Any]:
    out = env.work / f"producer-{uuid.uuid4().hex[:8]}.json"
    db = env.db if side != "peer" else env.db_async
    broker, redis = env.relay_of(side)
    proc = _child("producer", "--side", side, "--mode", mode, "--count", str(count),
                  "--rate", str(rate), "--topic", topic, "--db", db, "--redis", redis,
                  "--broker", broker, "--out", str(out), env=env, log_name="producer.log")
    while proc.poll() is None:
        await asyncio.sleep(0.05)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} producer failed ({proc.returncode}); see "
                           f"{env.work / 'producer.log'}")
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    return data


def reset_tables(env: Env) -> None:
    import psycopg

    libpq = env.db.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f"TRUNCATE rocketbox_transaction, {PEER_TABLE}")
        conn.execute("VACUUM ANALYZE rocketbox_transaction")
        conn.execute(f"VACUUM ANALYZE {PEER_TABLE}")


def count_unrelayed(env: Env) -> tuple[int, int]:
    import psycopg

    libpq = env.db.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(libpq, autocommit=True) as conn:
        ours = conn.execute("SELECT count(*) FROM rocketbox_transaction "
                            "WHERE relayed_at IS NULL").fetchone()
        peer = conn.execute(f"SELECT count(*) FROM {PEER_TABLE}").fetchone()
    return int(ours[0] if ours else -1), int(peer[0] if peer else -1)


@contextlib.asynccontextmanager
async def consumer(env: Env, side: str, name: str) -> Any:
    seen = Seen()
    stop, ready = asyncio.Event(), asyncio.Event()
    if side == "ours":
        task = asyncio.create_task(consume_ours(env.broker, name, seen, stop, ready))
    elif side == "rocketmq":
        await asyncio.to_thread(create_tx_topic, env.proxy_native, name)
        task = asyncio.create_task(consume_rocketmq(env.proxy_grpc, name, seen.add, stop, ready))
    else:
        task = asyncio.create_task(consume_peer(env.redis, name, seen, stop, ready))
    await asyncio.wait([task, asyncio.create_task(ready.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    try:
        yield seen
    finally:
        stop.set()
        await task


@contextlib.asynccontextmanager
async def peer_relay(env: Env, cfg: PeerConfig, stream: str) -> Any:
    ready = env.work / f"peer-ready-{uuid.uuid4().hex[:8]}"
    proc = _child("peer-relay", "--db", env.db_async, "--redis", env.redis, "--stream", stream,
                  "--ready", str(ready), "--max-workers", str(cfg.max_workers),
                  "--fetch-batch", str(cfg.fetch_batch_size),
                  "--flush-batch", str(cfg.terminal_flush_batch_size),
                  "--min-interval", str(cfg.min_fetch_interval),
                  "--max-interval", str(cfg.max_fetch_interval),
                  env=env, stdin=subprocess.PIPE, log_name="peer-relay.log")
    stdin = proc.popen.stdin if proc.popen is not None else None
    assert stdin is not None
    try:
        await _wait_ready(ready, proc)

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


def start_ours_worker(env: Env, concurrency: int, batch_size: int, drain_lanes: int,
                      side: str = "ours") -> None:
    """Our relay worker for ``side`` (ours: broker_lite's native door; rocketmq: the proxy)."""
    ready = env.work / f"{side}-ready-{uuid.uuid4().hex[:8]}"
    broker, redis = env.relay_of(side)
    proc = _child("ours-relay", "--db", env.db, "--redis", redis, "--broker", broker,
                  "--ready", str(ready), "--concurrency", str(concurrency),
                  "--batch-size", str(batch_size), "--drain-lanes", str(drain_lanes),
                  env=env, log_name=f"{side}-relay.log")
    if side == "rocketmq":
        env.rocketmq_worker = proc
    else:
        env.ours_worker = proc
    asyncio.run(_wait_ready(ready, proc))


def stop_ours_worker(env: Env) -> None:
    for proc in (env.ours_worker, env.rocketmq_worker):
        if proc is not None:
            proc.stop(timeout=20)
    env.ours_worker = env.rocketmq_worker = None


async def throughput_once(env: Env, side: str, rows: int, peer_cfg: PeerConfig,
                          timeout: float) -> dict[str, Any]:
    reset_tables(env)
    name = f"RelayBench{uuid.uuid4().hex[:10]}"
    await run_producer(env, side, "backlog", rows, topic=name)
    settle()
    async with consumer(env, side, name) as seen:
        if side != "peer":
            from outbox.celery import SWEEP_TASK

            app = env.celery_app if side == "ours" else env.rocketmq_app
            t0 = time.monotonic()
            app.tasks[SWEEP_TASK].apply_async()
            complete = await seen.wait_for(rows, timeout)
        else:
            async with peer_relay(env, peer_cfg, name) as go:
                t0 = time.monotonic()
                go()
                complete = await seen.wait_for(rows, timeout)
    last = max(seen.times.values()) if seen.times else t0
    missing = rows - len(seen.times)
    return {"seconds": last - t0, "per_s": rows / (last - t0) if complete else 0.0,
            "complete": complete, "missing": missing, "duplicates": seen.duplicates,
            "unrelayed_rows_after": count_unrelayed(env)[1 if side == "peer" else 0]}


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


#: seconds of paced load before the latency samples that count
WARMUP_SECONDS = 1.0


async def latency_once(env: Env, side: str, rate: float, seconds: float, peer_cfg: PeerConfig
                       ) -> dict[str, Any]:
    reset_tables(env)
    name = f"RelayBench{uuid.uuid4().hex[:10]}"
    # The first second of the paced stream is a warm-up and not counted: both
    # sides open connections, fill caches and start loops then (steady state is
    # what a fixed offered load measures).
    warm = int(rate * WARMUP_SECONDS)
    count = int(rate * seconds)
    total = warm + count
    settle()
    async with contextlib.AsyncExitStack() as stack:
        seen = await stack.enter_async_context(consumer(env, side, name))
        if side == "peer":
            go = await stack.enter_async_context(peer_relay(env, peer_cfg, name))
            go()
            await asyncio.sleep(0.5)  # the outbox broker's start (pool, LISTEN) is not timed
        freeze_heap()
        produced = await run_producer(env, side, "paced", total, topic=name, rate=rate)
        produced_at = time.monotonic()
        complete = await seen.wait_for(total, 120.0)
        drained_after = (max(seen.times.values()) - produced_at) if seen.times else float("nan")
    stamps = produced["stamps"]
    lat = [seen.times[i] - t for i, t in stamps if i in seen.times and i >= warm]
    lat_ms = [x * 1000 for x in lat]
    achieved = total / produced["seconds"]
    tail = lat_ms[-max(1, len(lat_ms) // 10):]
    head = lat_ms[: max(1, len(lat_ms) // 10)]
    kept_up = (complete and achieved >= 0.95 * rate
               and _percentile(tail, 50) <= max(4 * _percentile(head, 50), 20.0))
    return {"offered_per_s": rate, "committed_per_s": achieved, "count": count,
            "warmup_messages": warm,
            "p50_ms": _percentile(lat_ms, 50), "p90_ms": _percentile(lat_ms, 90),
            "p99_ms": _percentile(lat_ms, 99), "max_ms": max(lat_ms) if lat_ms else float("nan"),
            "first_tenth_p50_ms": _percentile(head, 50),
            "last_tenth_p50_ms": _percentile(tail, 50),
            "missing": total - len(seen.times), "duplicates": seen.duplicates,
            "drained_s_after_last_commit": drained_after, "kept_up": bool(kept_up)}


# -- orchestration ----------------------------------------------------------------------------


def prepare_schema(env: Env) -> None:
    from faststream_outbox import make_outbox_table
    from sqlalchemy import MetaData, create_engine

    from outbox import migrate

    migrate.upgrade(env.db)
    metadata = MetaData()
    make_outbox_table(metadata, table_name=PEER_TABLE)
    engine = create_engine(env.db)
    metadata.create_all(engine)
    engine.dispose()


def order_for(rep: int, sides: Sequence[str]) -> list[str]:
    """The sides measured in repetition ``rep``: the order rotates every repetition."""
    chosen = [s for s in SIDES if s in sides]
    shift = rep % len(chosen)
    return chosen[shift:] + chosen[:shift]


def tune_peer(env: Env, configs: Sequence[PeerConfig], rows: int, timeout: float,
              say: Any) -> tuple[PeerConfig, list[dict[str, Any]]]:
    trials = []
    for cfg in configs:
        result = asyncio.run(throughput_once(env, "peer", rows, cfg, timeout))
        trials.append({"config": dataclasses.asdict(cfg), "label": cfg.label, **result})
        say(f"  peer {cfg.label:>10} (workers/fetch batch/flush batch): "
            f"{result['per_s']:8,.0f} rows/s")
    best = max(zip(configs, trials, strict=True), key=lambda ct: ct[1]["per_s"])[0]
    return best, trials


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from support.servers import start_broker_lite, start_postgres, start_redis

    from outbox.celery import make_celery

    say = print
    load_before = load_average()
    if load_before and load_before[0] > 0.5 * (os.cpu_count() or 1):
        say(f"warning: load average {load_before[0]} at start: other work on this machine "
            "will add noise")
    work = TMP_DIR / f"relay-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    machine = describe_machine(work)
    say(f"relay benchmark on {machine_summary(machine)}")
    git = git_state()
    result: dict[str, Any] = {}
    try:
        with start_postgres() as pg, start_redis() as rds, \
                start_broker_lite(work / "broker", ["--flush", "async", "--log-level",
                                                    "warning"]) as bl, \
                contextlib.ExitStack() as stack:
            db = pg.create_database("relaybench")
            env = Env(db=db.url, db_async=db.url.replace("+psycopg", "+asyncpg"),
                      redis=rds.url, broker=bl.native, work=work)
            prepare_schema(env)
            from sqlalchemy import create_engine

            from outbox import Outbox

            env.celery_app = make_celery(Outbox(engine=create_engine(env.db),
                                                broker=env.broker,
                                                producer_group=PRODUCER_GROUP),
                                         broker_url=env.redis, settings=_celery_settings())
            if "rocketmq" in args.sides:
                proxy = stack.enter_context(start_broker_lite(work / "proxy", PROXY_FLAGS))
                env.proxy_native, env.proxy_grpc = proxy.native, proxy.grpc
                env.rocketmq_redis = other_redis_db(rds.url)
                broker, redis = env.relay_of("rocketmq")
                env.rocketmq_app = make_celery(
                    Outbox(engine=create_engine(env.db), broker=broker,
                           producer_group=PRODUCER_GROUP),
                    broker_url=redis, settings=_celery_settings())
            configs = [PeerConfig.parse(c) for c in args.peer_configs.split(",")]
            if len(configs) > 1 and "peer" in args.sides:
                say(f"tuning the peer on {args.tune_rows:,} rows, one run per setting:")
                best, trials = tune_peer(env, configs, args.tune_rows, args.timeout, say)
            else:
                best, trials = configs[0], []
            say(f"peer setting used: {best.label} (max_workers/fetch_batch_size/"
                f"terminal_flush_batch_size)")
            tp: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            lat: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for side in ("ours", "rocketmq"):
                if side in args.sides:
                    start_ours_worker(env, args.concurrency, args.batch_size,
                                      args.drain_lanes, side)
            try:
                for rep in range(args.repeat if "throughput" in args.cases else 0):
                    for side in order_for(rep, args.sides):
                        r = asyncio.run(throughput_once(env, side, args.rows, best,
                                                        args.timeout))
                        tp[side].append(r)
                        say(f"  throughput rep {rep + 1} {side:8}: {r['per_s']:8,.0f} rows/s "
                            f"({r['seconds']:.2f} s, missing {r['missing']}, "
                            f"duplicates {r['duplicates']})")
                if tp["ours"] and tp["peer"]:
                    ratios = [o["per_s"] / p["per_s"] if p["per_s"] else float("inf")
                              for o, p in zip(tp["ours"], tp["peer"], strict=True)]
                    say("  throughput ours/peer per rep: "
                        + ", ".join(f"{x:.2f}x" for x in ratios)
                        + f" (median {median(ratios):.2f}x)")
                for rep in range(args.lat_repeat if "latency" in args.cases else 0):
                    for side in order_for(rep, args.sides):
                        r = asyncio.run(latency_once(env, side, args.rate, args.seconds, best))
                        lat[side].append(r)
                        say(f"  latency rep {rep + 1} {side:8}: p50 {r['p50_ms']:6.1f} ms, "
                            f"p90 {r['p90_ms']:6.1f} ms, p99 {r['p99_ms']:7.1f} ms, max "
                            f"{r['max_ms']:7.1f} ms (p50 first/last tenth "
                            f"{r['first_tenth_p50_ms']:.1f}/{r['last_tenth_p50_ms']:.1f}), "
                            "committed "
                            f"{r['committed_per_s']:.0f}/s, kept up: {r['kept_up']}, "
                            f"missing {r['missing']}")
            finally:
                stop_ours_worker(env)
            bl_version = "broker_lite (this repository)"
    finally:
        if not args.keep_logs:
            shutil.rmtree(work, ignore_errors=True)
            with contextlib.suppress(OSError):
                TMP_DIR.rmdir()
    if args.restricted:
        return {}
    result = summarise(args, tp, lat, best, trials)
    result.update({
        "benchmark": "relay", "generated_at": utc_now(),
        "code": {"source": "working tree", **git},
        "machine": machine,
        "load_average": {"start": load_before, "end": load_average()},
        "versions": versions(), "broker": bl_version,
    })
    return result


def summarise(args: argparse.Namespace, tp: dict[str, list[dict[str, Any]]],
              lat: dict[str, list[dict[str, Any]]], best: PeerConfig,
              trials: list[dict[str, Any]]) -> dict[str, Any]:
    def tp_side(runs: list[dict[str, Any]]) -> dict[str, Any]:
        rates = Samples([r["per_s"] for r in runs])
        return {"per_s": rates.median, "spread": rates.spread,
                "missing": sum(r["missing"] for r in runs),
                "duplicates": sum(r["duplicates"] for r in runs), "runs": runs}

    def lat_side(runs: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {k: median([r[k] for r in runs])
                               for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms",
                                         "committed_per_s")}
        out["kept_up_all"] = all(r["kept_up"] for r in runs)
        out["missing"] = sum(r["missing"] for r in runs)
        out["duplicates"] = sum(r["duplicates"] for r in runs)
        out["runs"] = runs
        return out

    ratios = [o["per_s"] / p["per_s"] if p["per_s"] else float("inf")
              for o, p in zip(tp["ours"], tp["peer"], strict=True)] if tp["peer"] else []
    ours_lat = lat_side(lat["ours"]) if lat["ours"] else None
    peer_lat = lat_side(lat["peer"]) if lat["peer"] else None
    targets = [{"description": "throughput: ours / best peer setting", "target": TARGET_RATIO,
                "measured": median(ratios), "unit": "x",
                "met": median(ratios) >= TARGET_RATIO}] if ratios else []
    if ours_lat is not None:
        targets.append({"description": f"ours p99 commit-to-visible at {args.rate:.0f} tx/s",
                        "target": TARGET_P99_MS, "measured": ours_lat["p99_ms"], "unit": "ms",
                        "met": ours_lat["p99_ms"] <= TARGET_P99_MS and ours_lat["kept_up_all"]})
    return {
        "parameters": {
            "rows": args.rows, "repeat": args.repeat, "rate": args.rate,
            "seconds": args.seconds, "latency_repeat": args.lat_repeat,
            "latency_warmup_seconds": WARMUP_SECONDS,
            "body_size": BODY_SIZE, "backlog_rows_per_tx": BACKLOG_TX,
            "ours": {"celery_pool": "threads", "concurrency": args.concurrency,
                     "relay_batch_size": args.batch_size,
                     "relay_drain_lanes": args.drain_lanes, "processes": 1,
                     "throughput_trigger": "one rocketbox.sweep task (Relay.drain)",
                     "latency_path": "on_commit hook -> rocketbox.relay tasks, coalesced "
                                     "per enqueue_window",
                     "enqueue_window_s": _celery_settings().enqueue_window,
                     "broker_flush": "async", "celery_broker": "redis"},
            "peer": {"config": dataclasses.asdict(best), "processes": 1,
                     "driver": "asyncpg (LISTEN/NOTIFY)", "bus": "Redis stream (XADD)",
                     "handler": "async def relay(message: dict) -> dict: return message",
                     "tuning_rows": args.tune_rows, "tuning": trials},
            "redis_persistence": "none (support.servers.start_redis)",
            "postgres_settings": "support.servers.start_postgres: fsync=off, "
                                 "synchronous_commit=off, full_page_writes=off",
        },
        "throughput": {"ours": tp_side(tp["ours"]),
                       "peer": tp_side(tp["peer"]) if tp["peer"] else None,
                       "ratio_meaning": "ours rows/s / peer rows/s, median of paired reps",
                       "ratio_median": median(ratios) if ratios else None,
                       "ratio_samples": ratios},
        "latency": {"ours": ours_lat, "peer": peer_lat},
        "rocketmq": rocketmq_summary(tp, lat, tp_side, lat_side),
        "targets": targets,
    }


def rocketmq_summary(tp: dict[str, list[dict[str, Any]]], lat: dict[str, list[dict[str, Any]]],
                     tp_side: Any, lat_side: Any) -> dict[str, Any] | None:
    """The rocketmq side's figures, and its ratios to ours (medians of paired repetitions)."""
    if not tp["rocketmq"] and not lat["rocketmq"]:
        return None
    out: dict[str, Any] = {
        "meaning": "rocketmq / ours: rows/s (below 1 is slower), p50 and p99 (above 1 is "
                   "slower); medians of the ratios of paired repetitions",
        "throughput": tp_side(tp["rocketmq"]) if tp["rocketmq"] else None,
        "latency": lat_side(lat["rocketmq"]) if lat["rocketmq"] else None, "ratios": {}}
    if tp["rocketmq"] and tp["ours"]:
        samples = ratio_of_pairs(tp["rocketmq"], tp["ours"], "per_s")
        out["ratios"]["rows_per_s"] = {"median": median(samples), "samples": samples}
    if lat["rocketmq"] and lat["ours"]:
        for key in ("p50_ms", "p99_ms"):
            samples = ratio_of_pairs(lat["rocketmq"], lat["ours"], key)
            out["ratios"][key] = {"median": median(samples), "samples": samples}
    return out


def report(result: dict[str, Any]) -> None:
    tp, lat = result["throughput"], result["latency"]
    print()
    print(f"throughput (rows/s, median of {result['parameters']['repeat']}):")
    if tp["peer"] is not None:
        print(f"  ours {tp['ours']['per_s']:10,.0f}   peer {tp['peer']['per_s']:10,.0f}   "
              f"ours/peer {tp['ratio_median']:.2f}x (range {min(tp['ratio_samples']):.2f}-"
              f"{max(tp['ratio_samples']):.2f})")
    rmq = result.get("rocketmq")
    if rmq is not None:
        for key, r in rmq["ratios"].items():
            print(f"  rocketmq/ours {key}: {r['median']:.2f}x (samples "
                  + ", ".join(f"{x:.2f}" for x in r["samples"]) + ")")
    if lat["ours"] is not None:
        print(f"latency at {result['parameters']['rate']:.0f} tx/s offered (ms, medians):")
        sides = {**lat, "rocketmq": rmq["latency"] if rmq else None}
        for side in (s for s in SIDES if sides.get(s) is not None):
            s = sides[side]
            print(f"  {side:8} p50 {s['p50_ms']:7.1f}  p99 {s['p99_ms']:7.1f}  max "
                  f"{s['max_ms']:7.1f}  committed {s['committed_per_s']:.0f}/s  kept up: "
                  f"{s['kept_up_all']}")
    for t in result["targets"]:
        print(f"target: {t['description']}: goal {t['target']}{t['unit']}, measured "
              f"{t['measured']:.2f}{t['unit']}: {'met' if t['met'] else 'NOT met'}")


def run_header(result: dict[str, Any]) -> list[str]:
    """The first lines of a section: when, which code, which machine and how loaded."""
    load = result["load_average"]
    commit = (result["code"].get("commit") or "?")[:12]
    return [f"Last full run: {result['generated_at']}, working tree at `{commit}`.",
            f"Machine: {machine_summary(result['machine'])}; load average "
            f"{(load.get('start') or ['?'])[0]} at start, {(load.get('end') or ['?'])[0]} at "
            "end (1 min, the benchmark included)."]


def markdown_section(result: dict[str, Any]) -> str:
    p = result["parameters"]
    tp, lat = result["throughput"], result["latency"]
    peer_cfg = p["peer"]["config"]
    v = result["versions"]
    lines = [
        *run_header(result),
        f"Peer: faststream-outbox {v.get('faststream-outbox', '?')}, faststream "
        f"{v.get('faststream', '?')}, asyncpg {v.get('asyncpg', '?')}; setting used "
        f"max_workers={peer_cfg['max_workers']}, fetch_batch_size="
        f"{peer_cfg['fetch_batch_size']}, terminal_flush_batch_size="
        f"{peer_cfg['terminal_flush_batch_size']} (best of the settings tried, below). "
        f"Ours: one Celery worker, threads pool, concurrency {p['ours']['concurrency']}, "
        f"relay batch_size {p['ours']['relay_batch_size']}, drain_lanes "
        f"{p['ours'].get('relay_drain_lanes', 1)}; celery {v.get('celery', '?')}.",
        "",
        f"| throughput, {p['rows']:,} committed rows | rows/s (median of {p['repeat']}) "
        "| spread | missing | duplicates |",
        "|---|---:|---:|---:|---:|",
    ]
    for side, label in (("ours", "ours (Celery sweep -> broker_lite)"),
                        ("peer", "faststream-outbox (-> Redis stream)")):
        s = tp[side]
        lines.append(f"| {label} | {s['per_s']:,.0f} | {s['spread']:.0%} | {s['missing']} | "
                     f"{s['duplicates']} |")
    lines.append(f"| **ours / peer** | **{tp['ratio_median']:.2f}x** (range "
                 f"{min(tp['ratio_samples']):.2f}-{max(tp['ratio_samples']):.2f}) | | | |")
    if lat["ours"] is not None:
        lines += [
            "",
            f"| commit-to-visible at {p['rate']:.0f} tx/s offered, {p['seconds']:.0f} s "
            f"(median of {p['latency_repeat']}) | p50 ms | p90 ms | p99 ms | max ms "
            "| committed tx/s | kept up |",
            "|---|---:|---:|---:|---:|---:|:---:|",
        ]
        for side in ("ours", "peer"):
            s = lat[side]
            lines.append(f"| {side} | {s['p50_ms']:.1f} | {s['p90_ms']:.1f} | "
                         f"{s['p99_ms']:.1f} | {s['max_ms']:.1f} | {s['committed_per_s']:.0f} "
                         f"| {'yes' if s['kept_up_all'] else 'no'} |")
    trials = p["peer"]["tuning"]
    if trials:
        lines += ["", f"Peer settings tried ({p['peer']['tuning_rows']:,} rows, one run each): "
                  + ", ".join(f"{t['label']}: {t['per_s']:,.0f} rows/s" for t in trials)
                  + " (max_workers/fetch_batch_size/terminal_flush_batch_size)."]
    lines += ["", "| target | goal | measured | met |", "|---|---:|---:|:---:|"]
    for t in result["targets"]:
        lines.append(f"| {t['description']} | {t['target']:g}{t['unit']} | "
                     f"{t['measured']:.2f}{t['unit']} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines)


def rocketmq_section(result: dict[str, Any]) -> str:
    """bench/README.md's ``relay-rocketmq`` section: our relay, native door and RocketMQ target."""
    p, rmq = result["parameters"], result["rocketmq"]
    lines = [
        *run_header(result),
        "Both sides: one Celery worker, threads pool, "
        f"concurrency {p['ours']['concurrency']}, relay batch_size "
        f"{p['ours']['relay_batch_size']}; throughput {p['rows']:,} rows (median of "
        f"{p['repeat']}), latency {p['rate']:.0f} tx/s offered for {p['seconds']:.0f} s "
        f"(median of {p['latency_repeat']}).",
        "",
        "| side | rows/s | p50 ms | p99 ms | kept up | missing | duplicates |",
        "|---|---:|---:|---:|:---:|---:|---:|",
    ]
    for label, t, la in (("ours -> broker_lite native door", result["throughput"]["ours"],
                          result["latency"]["ours"]),
                         ("ours -> RocketMQ 5 target (official client, strict proxy mode)",
                          rmq["throughput"], rmq["latency"])):
        missing = (t["missing"] if t else 0) + (la["missing"] if la else 0)
        dup = (t["duplicates"] if t else 0) + (la["duplicates"] if la else 0)
        lines.append(f"| {label} | {t['per_s']:,.0f} | {la['p50_ms']:.1f} | {la['p99_ms']:.1f} "
                     f"| {'yes' if la['kept_up_all'] else 'no'} | {missing} | {dup} |"
                     if t and la else f"| {label} | - | - | - | - | {missing} | {dup} |")
    r = rmq["ratios"]
    cells = [f"**{r[k]['median']:.2f}x** ({min(r[k]['samples']):.2f}-"
             f"{max(r[k]['samples']):.2f})" if k in r else "-"
             for k in ("rows_per_s", "p50_ms", "p99_ms")]
    lines.append(f"| **RocketMQ target / native** | {cells[0]} | {cells[1]} | {cells[2]} "
                 "| | | |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--role", default="main", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, default=20_000,
                        help="rows per throughput run (default 20000)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="throughput repetitions per side (default 5)")
    parser.add_argument("--rate", type=float, default=500.0,
                        help="offered load of the latency runs, tx/s (default 500)")
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="length of a latency run (default 20)")
    parser.add_argument("--lat-repeat", type=int, default=3,
                        help="latency repetitions per side (default 3)")
    parser.add_argument("--peer-configs", default="1/10/1,8/100/50,16/200/50,32/400/100,64/800/200",
                        help="faststream-outbox settings to try, comma-separated "
                             "max_workers/fetch_batch_size/terminal_flush_batch_size; the "
                             "best on throughput is used")
    parser.add_argument("--tune-rows", type=int, default=10_000,
                        help="rows per peer tuning run (default 10000)")
    parser.add_argument("--concurrency", type=int, default=4,
                        help="our Celery worker's threads (default 4)")
    parser.add_argument("--batch-size", type=int, default=200,
                        help="our relay's batch_size (default 200, the library default)")
    parser.add_argument("--drain-lanes", type=int, default=3,
                        help="our relay's drain_lanes: passes the sweep runs at once "
                             "(default 3, the library default)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="give up a throughput run after this long (s)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run (< 60 s): 2000 rows, 1 repetition, 5 s latency "
                             "runs, one peer setting; prints only")
    parser.add_argument("--cases", default="throughput,latency",
                        help="what to measure, comma-separated: throughput, latency "
                             "(default both; a subset only prints)")
    parser.add_argument("--sides", default="ours,peer",
                        help="whom to measure, comma-separated: ours (our relay to "
                             "broker_lite's native door), rocketmq (our relay with the "
                             "RocketMQ 5 target, to broker_lite in strict proxy mode), peer "
                             "(faststream-outbox). Saved: ours,peer and ours,rocketmq,peer to "
                             "relay.json; ours,rocketmq to relay-rocketmq.json (default "
                             "ours,peer; other sets only print)")
    parser.add_argument("--enqueue-window", type=float, default=None,
                        help="our on_commit hook's CelerySettings.enqueue_window in seconds "
                             "(default: the library's)")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep bench/results/tmp/relay-PID (child logs) afterwards")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the README section from bench/results/relay.json")
    # child roles
    for name in ("--db", "--redis", "--broker", "--ready", "--stream", "--topic", "--out",
                 "--side", "--mode"):
        parser.add_argument(name, default="", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    for name, default in (("--max-workers", 1), ("--fetch-batch", 10), ("--flush-batch", 1)):
        parser.add_argument(name, type=int, default=default, help=argparse.SUPPRESS)
    parser.add_argument("--min-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    parser.add_argument("--max-interval", type=float, default=10.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.cases = [c for c in str(args.cases).split(",") if c]
    args.sides = [c for c in str(args.sides).split(",") if c]
    if set(args.cases) - {"throughput", "latency"} or set(args.sides) - set(SIDES):
        parser.error("--cases takes throughput,latency and --sides takes "
                     f"{','.join(SIDES)}")
    args.restricted = set(args.cases) != {"throughput", "latency"} or \
        frozenset(args.sides) not in SAVED_SIDES
    if args.quick:
        args.rows, args.repeat, args.seconds, args.lat_repeat = 2000, 1, 5.0, 1
        args.peer_configs = args.peer_configs.split(",")[-2]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "ours-relay":
        return ours_relay_main(args)
    if args.role == "peer-relay":
        return asyncio.run(peer_relay_main(args))
    if args.role == "producer":
        return producer_main(args)
    if args.render:
        result = json.loads((RESULTS_DIR / "relay.json").read_text(encoding="utf-8"))
        update_readme_section(BENCH_DIR / "README.md", "relay", markdown_section(result))
        return 0
    if "peer" in args.sides:
        require_peer()
    if args.enqueue_window is not None:
        os.environ[ENQUEUE_WINDOW_ENV] = str(args.enqueue_window)
    result = measure(args)
    if args.restricted:
        print("--cases/--sides subset: results not saved")
        return 0
    report(result)
    if args.quick:
        print("quick run: results not saved")
        return 0
    if "peer" in args.sides:
        write_json(RESULTS_DIR / "relay.json", result)
        update_readme_section(BENCH_DIR / "README.md", "relay", markdown_section(result))
        print(f"wrote {RESULTS_DIR / 'relay.json'} and the relay section of bench/README.md")
    if "rocketmq" in args.sides:
        write_json(RESULTS_DIR / "relay-rocketmq.json", result)
        update_readme_section(BENCH_DIR / "README.md", "relay-rocketmq",
                              rocketmq_section(result))
        print(f"wrote {RESULTS_DIR / 'relay-rocketmq.json'} and the relay-rocketmq section "
              "of bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
