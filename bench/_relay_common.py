"""bench/relay.py's shared pieces: bodies, what a consumer saw, the run's servers, children.

The constants naming the producer group, the peer's table and queue; the
JSON body of a message (:func:`body`); the paced schedule of the latency
producers; :class:`Seen`, what a consumer received; :class:`Env`, the
servers and relay workers of one run; and how the harness starts a child
role of bench/relay.py (:func:`child`) and waits for its ready file.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import BENCH_DIR, REPO_ROOT, add_repository_paths

add_repository_paths()

from procgroup import Process  # noqa: E402

__all__ = [
    "BACKLOG_TX",
    "BODY_SIZE",
    "ENQUEUE_WINDOW_ENV",
    "ID_RE",
    "LISTEN_ENV",
    "LISTEN_LANES_ENV",
    "PEER_QUEUE",
    "PEER_TABLE",
    "PRODUCER_GROUP",
    "READY_TIMEOUT",
    "RELAY_SCRIPT",
    "SIDES",
    "Env",
    "Seen",
    "body",
    "child",
    "freeze_heap",
    "paced",
    "percentile",
    "wait_ready",
]

#: the script every child role runs (``--role ...``)
RELAY_SCRIPT = BENCH_DIR / "relay.py"
BODY_SIZE = 256
ID_RE = re.compile(rb'"i":\s*(\d+)')
PRODUCER_GROUP = "relaybench"
PEER_TABLE = "peer_outbox"
PEER_QUEUE = "bench"
#: rows per transaction when the throughput backlog is written (not timed)
BACKLOG_TX = 100
READY_TIMEOUT = 60.0
#: who can be measured: our relay to broker_lite, ours to a RocketMQ 5 proxy, the peer
SIDES = ("ours", "rocketmq", "nats", "peer")
#: --enqueue-window reaches the producer and worker children through this variable
ENQUEUE_WINDOW_ENV = "ROCKETBOX_BENCH_ENQUEUE_WINDOW"
#: --listen ("1"): our hook NOTIFYs and our worker listens (outbox.celery.listen)
LISTEN_ENV = "ROCKETBOX_BENCH_LISTEN"
#: --listen-lanes N: our worker's CelerySettings.listen_lanes
LISTEN_LANES_ENV = "ROCKETBOX_BENCH_LISTEN_LANES"


def body(i: int) -> dict[str, Any]:
    """A JSON body of BODY_SIZE bytes (compact encoding) carrying the sequence number."""
    head = len(json.dumps({"i": i, "pad": ""}, separators=(",", ":")))
    return {"i": i, "pad": "x" * max(0, BODY_SIZE - head)}


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


def paced(count: int, rate: float) -> Iterator[int]:
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


@dataclass
class Env:
    """The servers of one run, and our relay workers and their Celery apps."""

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
    #: the nats side: nats-server's URL, its Celery queue, app, worker, the client's rates
    nats_url: str = ""
    nats_redis: str = ""
    nats_app: Any = None
    nats_worker: Process | None = None
    nats_raw: list[dict[str, Any]] = field(default_factory=list)

    def relay_of(self, side: str) -> tuple[str, str]:
        """(broker address, Celery broker URL) of our relay on ``side``."""
        if side == "rocketmq":
            return f"rocketmq://{self.proxy_grpc}", self.rocketmq_redis
        if side == "nats":
            return self.nats_url, self.nats_redis
        return self.broker, self.redis


def child(role: str, *extra: str, env: Env, stdin: int = subprocess.DEVNULL,
          log_name: str) -> Process:
    """bench/relay.py ``--role ROLE`` in a child process, logging to ``work/log_name``."""
    argv = [sys.executable, str(RELAY_SCRIPT), "--role", role, *extra]
    return Process(argv, log=env.work / log_name, stdin=stdin, name=role,
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).start()


async def wait_ready(path: Path, proc: Process) -> None:
    """Until the child wrote ``path`` (its ready file); raises if it exits or times out."""
    await asyncio.to_thread(proc.wait_until, path.exists, READY_TIMEOUT,
                            what=f"{path.name} written", interval=0.02)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values`` by nearest rank; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]
