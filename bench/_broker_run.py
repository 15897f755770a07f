"""bench/broker.py's runs: one timed run of a side, and the rounds of one flush mode.

:func:`broker_workload` and :func:`redis_workload` build a case's two
sides; :func:`measure_once` opens one, times its load, verifies and closes
it, on a fresh event loop from a quiet start; :func:`run_mode` repeats the
cases of one flush mode, ours and Redis back to back, the order flipping
each round.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from _broker_cases import CaseSpec, Comparison, Measurement, Workload
from _broker_ours import BrokerConsume, BrokerSend, BrokerTx, preload_broker
from _broker_redis import RedisConsume, RedisSend, RedisTx, preload_redis
from _broker_servers import ServerProcess, Servers
from _common import settle
from rich.progress import Progress

__all__ = ["BROKER_TOPICS", "broker_workload", "measure_once", "redis_workload", "run_mode"]

BROKER_TOPICS = {"send": "BenchSend", "tx": "BenchTx", "consume": "BenchConsume"}


def broker_workload(spec: CaseSpec, pair: Servers) -> Workload:
    topic = f"{BROKER_TOPICS[spec.kind]}_{spec.name.replace('-', '_')}"
    if spec.kind == "consume":
        topic = BROKER_TOPICS["consume"]
    factories: dict[str, Callable[[str, CaseSpec, str], Workload]] = {
        "send": BrokerSend, "tx": BrokerTx, "consume": BrokerConsume}
    return factories[spec.kind](pair.address, spec, topic)


def redis_workload(spec: CaseSpec, pair: Servers) -> Workload:
    if spec.kind == "consume":
        return RedisConsume(pair.port, spec, "bench:consume")
    factories: dict[str, Callable[[int, CaseSpec, str], Workload]] = {
        "send": RedisSend, "tx": RedisTx}
    return factories[spec.kind](pair.port, spec, f"bench:{spec.name}")


def measure_once(work: Workload, server: ServerProcess, *,
                 around_load: Callable[[], contextlib.AbstractContextManager[None]] = (
                     contextlib.nullcontext)) -> Measurement:
    """Open, time ``load``, verify, close; on a fresh event loop, from a quiet start.

    ``around_load`` wraps the timed part (the profiler uses it).
    """
    settle()

    async def run() -> Measurement:
        await work.open()
        try:
            with around_load():
                cpu0, client0 = server.cpu_seconds(), time.process_time()
                started = time.perf_counter()
                await work.load()
                seconds = time.perf_counter() - started
                result = Measurement(seconds, server.cpu_seconds() - cpu0,
                                     time.process_time() - client0)
            await work.verify()
        finally:
            await work.close()
        return result

    return asyncio.run(run())


def run_mode(pair: Servers, cases: Sequence[Comparison], repeat: int, progress: Progress,
             task: Any) -> None:
    """``repeat`` rounds over the cases of one flush mode, the order flipping each round."""
    consume = [c for c in cases if c.spec.kind == "consume"]
    if consume:
        count = max(c.spec.count for c in consume)
        progress.update(task, description=f"preloading {count:,} messages for consume")
        asyncio.run(preload_broker(pair.address, BROKER_TOPICS["consume"], count))
        asyncio.run(preload_redis(pair.port, "bench:consume", count))
    for rep in range(repeat):
        for case in cases:
            order = ("ours", "redis") if rep % 2 == 0 else ("redis", "ours")
            for label in order:
                progress.update(task, description=f"[{rep + 1}/{repeat}] {case.name} {label}")
                if label == "ours":
                    case.ours.samples.append(
                        measure_once(broker_workload(case.spec, pair), pair.broker))
                else:
                    case.redis.samples.append(
                        measure_once(redis_workload(case.spec, pair), pair.redis))
                progress.advance(task)
