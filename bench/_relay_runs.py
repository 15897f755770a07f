"""bench/relay.py's runs: one throughput or latency run of a side, and what they need.

A run resets the outbox tables, starts a consumer for the side
(:func:`consumer`), has a producer child write the rows (:func:`run_producer`,
:func:`producer_main` in the child) and measures: :func:`throughput_once` a
backlog relayed after one go, :func:`latency_once` commit-to-visible under a
paced load. Also the servers of a run and the schema both sides need
(:func:`harness`), the order of the sides in a repetition, and the peer's
tuning runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from _common import settle
from _relay_common import PEER_TABLE, SIDES, Env, Seen, child, freeze_heap, percentile
from _relay_floors import SERVER_PIDS, broker_floor, cpu_split, relay_floor
from _relay_legs import leg_summary, read_records, sql_bound
from _relay_nats import consume_nats
from _relay_ours import consume_ours, ours_celery_app, ours_producer
from _relay_peer import PeerConfig, consume_peer, peer_producer, peer_relay
from _relay_rocketmq import consume_rocketmq, create_tx_topic

__all__ = [
    "WARMUP_SECONDS",
    "bound_once",
    "consumer",
    "count_unrelayed",
    "floors_once",
    "harness",
    "latency_once",
    "order_for",
    "prepare_schema",
    "producer_main",
    "reset_tables",
    "run_producer",
    "throughput_once",
    "tune_peer",
]


#: seconds of paced load before the latency samples that count
WARMUP_SECONDS = 1.0


def producer_main(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    stamps = ours_producer(args) if args.side != "peer" else asyncio.run(peer_producer(args))
    elapsed = time.monotonic() - t0
    Path(args.out).write_text(json.dumps({"stamps": stamps, "seconds": elapsed}),
                              encoding="utf-8")
    return 0


async def run_producer(env: Env, side: str, mode: str, count: int, *, topic: str = "",
                       rate: float = 0.0) -> dict[str, Any]:
    out = env.work / f"producer-{uuid.uuid4().hex[:8]}.json"
    db = env.db if side != "peer" else env.db_async
    broker, redis = env.relay_of(side)
    proc = child("producer", "--side", side, "--mode", mode, "--count", str(count),
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
    elif side == "nats":
        task = asyncio.create_task(consume_nats(env.nats_url, name, seen.add, stop, ready))
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


async def throughput_once(env: Env, side: str, rows: int, peer_cfg: PeerConfig,
                          timeout: float, *,
                          around: Callable[[], contextlib.AbstractContextManager[None]] = (
                              contextlib.nullcontext)) -> dict[str, Any]:
    """One throughput run of ``side``; ``around`` wraps its timed part (the profiler)."""
    reset_tables(env)
    name = f"RelayBench{uuid.uuid4().hex[:10]}"
    await run_producer(env, side, "backlog", rows, topic=name)
    settle()
    cpu: dict[str, float] = {}
    async with consumer(env, side, name) as seen:
        if side != "peer":
            from outbox.celery import SWEEP_TASK

            app = {"ours": env.celery_app, "rocketmq": env.rocketmq_app,
                   "nats": env.nats_app}[side]
            worker = {"ours": env.ours_worker, "rocketmq": env.rocketmq_worker,
                      "nats": env.nats_worker}[side]
            pids = dict(SERVER_PIDS) if side == "ours" else {}
            if worker is not None:
                pids["worker"] = worker.pid
            # who used the cores while ours ran: the worker, broker_lite, PostgreSQL and
            # the consumer (this process)
            with around():
                watch = cpu_split(pids)
                t0 = time.monotonic()
                app.tasks[SWEEP_TASK].apply_async()
                complete = await seen.wait_for(rows, timeout)
                cpu = watch()
        else:
            async with peer_relay(env, peer_cfg, name) as go:
                t0 = time.monotonic()
                go()
                complete = await seen.wait_for(rows, timeout)
    last = max(seen.times.values()) if seen.times else t0
    missing = rows - len(seen.times)
    return {"seconds": last - t0, "per_s": rows / (last - t0) if complete else 0.0,
            "complete": complete, "missing": missing, "duplicates": seen.duplicates,
            "unrelayed_rows_after": count_unrelayed(env)[1 if side == "peer" else 0],
            "cpu_s": cpu}


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
    legs_file = env.work / "legs.jsonl"  # the leg records of ours (bench/_relay_legs.py)
    legs_file.unlink(missing_ok=True)
    legs_file.touch()  # our processes record legs only while it exists (not in throughput runs)
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
    lat = [seen.times[s[0]] - s[1] for s in stamps if s[0] in seen.times and s[0] >= warm]
    legs = None
    if side != "peer":
        legs = leg_summary([(s[2], s[1], seen.times[s[0]]) for s in stamps
                            if s[0] in seen.times and s[0] >= warm], read_records(legs_file))
    legs_file.unlink(missing_ok=True)
    lat_ms = [x * 1000 for x in lat]
    achieved = total / produced["seconds"]
    tail = lat_ms[-max(1, len(lat_ms) // 10):]
    head = lat_ms[: max(1, len(lat_ms) // 10)]
    kept_up = (complete and achieved >= 0.95 * rate
               and percentile(tail, 50) <= max(4 * percentile(head, 50), 20.0))
    return {"offered_per_s": rate, "committed_per_s": achieved, "count": count,
            "warmup_messages": warm,
            "p50_ms": percentile(lat_ms, 50), "p90_ms": percentile(lat_ms, 90),
            "p99_ms": percentile(lat_ms, 99), "max_ms": max(lat_ms) if lat_ms else float("nan"),
            "first_tenth_p50_ms": percentile(head, 50),
            "last_tenth_p50_ms": percentile(tail, 50),
            "missing": total - len(seen.times), "duplicates": seen.duplicates,
            "drained_s_after_last_commit": drained_after, "kept_up": bool(kept_up),
            "legs": legs}


async def bound_once(env: Env, rows: int, batch_size: int) -> dict[str, Any]:
    """The SQL-only bound (bench/_relay_legs.py) over a backlog of ``rows`` of our table."""
    reset_tables(env)
    await run_producer(env, "ours", "backlog", rows, topic="RelayBound")
    settle()
    # its CPU (the one backend's and the loop's) is read inside: the backend exits with it
    return await asyncio.to_thread(sql_bound, env.db, batch_size, rows)


async def floors_once(env: Env, rows: int, batch_size: int, lanes: int) -> dict[str, Any]:
    """The floors beside the bound (bench/_relay_floors.py): our relay over a backlog of
    ``rows`` with the broker answered in-process, then the broker alone, twice."""
    from _relay_common import body

    reset_tables(env)
    await run_producer(env, "ours", "backlog", rows, topic="RelayFloor")
    settle()
    relay = await asyncio.to_thread(relay_floor, env.db, batch_size, lanes, rows)
    as_broker_bench = await asyncio.to_thread(broker_floor, env.broker, rows,
                                              per_request=64, window=8)
    relay_body = json.dumps(body(0), separators=(",", ":")).encode()
    relay_shape = await asyncio.to_thread(broker_floor, env.broker, rows,
                                          per_request=batch_size, window=lanes,
                                          body=relay_body)
    return {"relay_sql": relay, "broker_tx_batch_async": as_broker_bench,
            "broker_relay_shape": relay_shape}


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


@contextlib.contextmanager
def harness(work: Path, database: str) -> Iterator[Env]:
    """PostgreSQL (``database``, both outbox tables), Redis, broker_lite (async flush) and
    the Celery app that enqueues our sweeps, as an :class:`Env`; ``work`` holds their data."""
    from tests.support.broker_server import start_broker_lite
    from tests.support.servers import start_postgres, start_redis

    with start_postgres() as pg, start_redis() as rds, \
            start_broker_lite(work / "broker", ["--flush", "async", "--log-level",
                                                "warning"]) as bl:
        db = pg.create_database(database)
        if pg.process is not None:
            SERVER_PIDS["postgres"] = pg.process.pid
        SERVER_PIDS["broker"] = bl.process.pid
        env = Env(db=db.url, db_async=db.url.replace("+psycopg", "+asyncpg"),
                  redis=rds.url, broker=bl.native, work=work)
        prepare_schema(env)
        env.celery_app = ours_celery_app(env)
        yield env


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
