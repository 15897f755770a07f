"""bench/relay.py's baseline for the ``rocketmq`` side: the official client alone.

How fast does the official RocketMQ 5 client itself do half + commit against
the same gRPC door (broker_lite in strict proxy mode) in the same run? Each
of ``threads`` threads of this process loops: ``begin_transaction()``, a
``send()`` of the relay's 256-byte body (carrying its number ``i``),
``commit()``, until ``count`` transactions are done, to a topic of its own,
typed TRANSACTION. It is timed as the relay is: from the start to the moment
the same consumer as the rocketmq side's (the official ``SimpleConsumer``,
:func:`_relay_rocketmq.consume_rocketmq`) has seen the last message, so both
pay for the door's consuming. No database: this is the ceiling the client and
the door put on any relay, the rate the RocketMQ target is held to. The best
of several thread counts is the baseline.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from _relay_common import Env, body

__all__ = ["RAW_THREADS", "raw_best", "raw_once", "raw_visible"]

#: the thread counts tried; the best rate is the baseline
RAW_THREADS = (8, 16, 32, 64)
#: transactions before the clock starts (numbered from ``count``)
WARM = 5


def raw_once(grpc: str, topic: str, count: int, threads: int) -> dict[str, Any]:
    """``count`` half + commit transactions on ``threads`` threads: the time and errors."""
    import rocketmq  # the official client alone: this is the baseline, none of our code

    class Unknown(rocketmq.TransactionChecker):  # type: ignore[misc]  # the client is untyped
        def check(self, message: rocketmq.Message) -> Any:
            return rocketmq.TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED

    configuration = rocketmq.ClientConfiguration(grpc, rocketmq.Credentials(), request_timeout=10)
    producer = rocketmq.Producer(configuration, (topic,), checker=Unknown())
    producer.startup()
    numbers = itertools.count()
    errors: list[str] = []

    def one(i: int) -> None:
        message = rocketmq.Message()
        message.topic = topic
        message.body = json.dumps(body(i), separators=(",", ":")).encode()
        transaction = producer.begin_transaction()
        producer.send(message, transaction)
        transaction.commit()

    def work() -> None:
        while (i := next(numbers)) < count:
            try:
                one(i)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    try:
        for n in range(WARM):  # warm: routes, channels, the door's first requests
            one(count + n)
        workers = [threading.Thread(target=work, name=f"raw-{n}") for n in range(threads)]
        started = time.monotonic()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.monotonic() - started
    finally:
        producer.shutdown()
    return {"started": started, "seconds": seconds, "errors": len(errors),
            "last_error": errors[-1] if errors else None}


async def raw_visible(env: Env, count: int, threads: int, timeout: float) -> dict[str, Any]:
    """:func:`raw_once` on a new topic, timed until the consumer has seen every message."""
    from _relay_runs import consumer

    name = f"RawClient{uuid.uuid4().hex[:10]}"
    async with consumer(env, "rocketmq", name) as seen:
        sent = await asyncio.to_thread(raw_once, env.proxy_grpc, name, count, threads)
        complete = await seen.wait_for(count + WARM, timeout)
    t0 = float(sent["started"])  # after the warm-up, on the same monotonic clock
    wanted = [t for i, t in seen.times.items() if i < count]
    last = max(wanted) if wanted else t0
    return {"threads": threads, "rows": count, "seconds": last - t0,
            "per_s": count / (last - t0) if complete else 0.0, "complete": complete,
            "send_seconds": sent["seconds"], "errors": sent["errors"],
            "last_error": sent["last_error"], "duplicates": seen.duplicates}


def raw_best(env: Env, count: int, timeout: float,
             threads: Sequence[int] = RAW_THREADS) -> dict[str, Any]:
    """:func:`raw_visible` at each thread count; the best rate and every trial."""
    trials = [asyncio.run(raw_visible(env, count, n, timeout)) for n in threads]
    best = max(trials, key=lambda t: float(t["per_s"]))
    return {"per_s": best["per_s"], "threads": best["threads"], "trials": trials}
