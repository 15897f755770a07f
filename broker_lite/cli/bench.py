"""``broker-lite bench``: a load generator on the asyncio client, with pipelining.

Modes:

  send     --concurrency senders share one connection, each sending as fast
           as its answers come back; latency = send to SendResult.
  tx       the same with transactions: half, local transaction (a no-op that
           commits), end-transaction; latency = the whole call.
  consume  a push consumer (fresh group, starting at the topic's end) and a
           producer run together; latency = born timestamp to delivery.

It prints the rate (msgs/s, or tx/s for tx) and latency percentiles (p50,
p90, p99, max); --json prints one JSON object instead.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from broker_lite.client import (
    AsyncAdmin,
    AsyncProducer,
    AsyncPullConsumer,
    AsyncPushConsumer,
    AsyncTransactionProducer,
    ClientConfig,
    ConsumeResult,
    LocalTransactionState,
    Message,
    ReceivedMessage,
)
from broker_lite.errors import BrokerError

from .arg_types import positive_int
from .send import add_connection_args, client_config, run_client

__all__ = ["BenchResult", "percentile", "register", "run"]

_RUN_PROPERTY = "bench_run"


def register(sub: Any) -> None:
    p = sub.add_parser("bench", help="load generator: msgs/s, tx/s and latency percentiles",
                       description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_args(p)
    load = p.add_argument_group("load")
    load.add_argument("--mode", choices=("send", "tx", "consume"), default="send",
                      help="what to measure (default: send)")
    load.add_argument("--count", type=positive_int, default=10_000, metavar="N",
                      help="messages (or transactions) in all (default: 10000)")
    load.add_argument("--size", type=positive_int, default=128, metavar="B",
                      help="body size in bytes (default: 128)")
    load.add_argument("--concurrency", type=positive_int, default=64, metavar="C",
                      help="requests in flight at once (default: 64)")
    load.add_argument("--topic", default="BenchTopic", help="topic (default: BenchTopic)")
    load.add_argument("--group", default="broker-lite-bench",
                      help="producer group (default: broker-lite-bench)")
    load.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=functools.partial(run, parser=p))


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(pct / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


@dataclass
class BenchResult:
    mode: str
    count: int
    size: int
    concurrency: int
    elapsed: float = 0.0
    done: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    first_error: str = ""

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        rate = self.done / self.elapsed if self.elapsed > 0 else 0.0
        return {
            "mode": self.mode, "count": self.count, "done": self.done, "errors": self.errors,
            "size": self.size, "concurrency": self.concurrency,
            "elapsed_s": round(self.elapsed, 4),
            "tx_per_s" if self.mode == "tx" else "msgs_per_s": round(rate, 1),
            "mb_per_s": round(rate * self.size / 1e6, 3),
            "p50_ms": round(percentile(lat, 50), 3), "p90_ms": round(percentile(lat, 90), 3),
            "p99_ms": round(percentile(lat, 99), 3),
            "max_ms": round(lat[-1], 3) if lat else 0.0,
            "first_error": self.first_error or None,
        }

    def record_error(self, exc: BaseException) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = f"{type(exc).__name__}: {exc}"


def _message(args: argparse.Namespace, run_id: str) -> Message:
    return Message(args.topic, b"x" * args.size, tags="bench",
                   properties={_RUN_PROPERTY: run_id})


async def _drive(result: BenchResult, concurrency: int, one: Any) -> None:
    """``concurrency`` workers call ``await one()`` until ``result.count`` calls are made."""
    started = 0

    async def worker() -> None:
        nonlocal started
        while started < result.count:
            started += 1
            t0 = time.perf_counter()
            try:
                await one()
            except BrokerError as exc:
                result.record_error(exc)
                continue
            result.latencies_ms.append((time.perf_counter() - t0) * 1000)
            result.done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, result.count))))
    result.elapsed = time.perf_counter() - t0


async def _bench_send(args: argparse.Namespace, config: ClientConfig,
                      result: BenchResult) -> None:
    msg = _message(args, uuid.uuid4().hex)
    async with AsyncProducer(args.group, config=config) as producer:
        await producer.send(msg)  # warm up: the topic exists, the path is hot
        await _drive(result, args.concurrency, functools.partial(producer.send, msg))


class _Commit:
    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


async def _bench_tx(args: argparse.Namespace, config: ClientConfig,
                    result: BenchResult) -> None:
    msg = _message(args, uuid.uuid4().hex)
    async with AsyncTransactionProducer(args.group, _Commit(), config=config) as producer:

        async def one() -> None:
            sent = await producer.send_message_in_transaction(msg)
            if sent.end_error is not None:
                raise sent.end_error

        await _drive(result, args.concurrency, one)


async def _bench_consume(args: argparse.Namespace, config: ClientConfig,
                         result: BenchResult) -> None:
    run_id = uuid.uuid4().hex
    group = f"bench-consume-{run_id[:12]}"
    async with AsyncAdmin(config=config) as admin:
        route = await admin.create_topic(args.topic, 4)
    # The fresh group starts at the topic's current end, so only this run's messages count.
    async with AsyncPullConsumer(group, config=config) as setup:
        for queue_id, offset in enumerate(route.max_offsets):
            await setup.commit(args.topic, queue_id, offset)
    all_in = asyncio.Event()

    async def on_message(msg: ReceivedMessage) -> ConsumeResult:
        if msg.properties.get(_RUN_PROPERTY) == run_id:
            result.latencies_ms.append(max(0.0, time.time() * 1000 - msg.born_timestamp))
            result.done += 1
            if result.done >= result.count:
                all_in.set()
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(group, listener=on_message, config=config,
                                 consume_threads=args.concurrency, long_poll_ms=5_000,
                                 pull_batch_size=64, rebalance_interval=5.0)
    consumer.subscribe(args.topic)
    msg = _message(args, run_id)
    t0 = time.perf_counter()
    await consumer.start()
    try:
        async with AsyncProducer(args.group, config=config) as producer:
            sender = BenchResult("send", args.count, args.size, args.concurrency)
            await _drive(sender, args.concurrency, functools.partial(producer.send, msg))
            result.errors = sender.errors
            result.first_error = sender.first_error
        deadline = 30.0 + args.count / 1000
        try:
            await asyncio.wait_for(all_in.wait(), deadline)
        except TimeoutError:
            result.record_error(TimeoutError(
                f"only {result.done} of {args.count} messages consumed within {deadline:.0f}s"))
        result.elapsed = time.perf_counter() - t0
    finally:
        await consumer.shutdown()


def _print_human(summary: dict[str, Any], server: str) -> None:
    unit = "tx/s" if summary["mode"] == "tx" else "msgs/s"
    rate = summary.get("tx_per_s", summary.get("msgs_per_s"))
    lines = [
        f"bench {summary['mode']}: {summary['count']} x {summary['size']} B, concurrency "
        f"{summary['concurrency']}, broker {server}",
        f"  elapsed     {summary['elapsed_s']:.3f} s",
        f"  throughput  {rate:.0f} {unit} ({summary['mb_per_s']:.2f} MB/s)",
        f"  latency ms  p50 {summary['p50_ms']:.2f}  p90 {summary['p90_ms']:.2f}  "
        f"p99 {summary['p99_ms']:.2f}  max {summary['max_ms']:.2f}",
        f"  done {summary['done']}  errors {summary['errors']}"
        + (f" (first: {summary['first_error']})" if summary["first_error"] else ""),
    ]
    sys.stdout.write("\n".join(lines) + "\n")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    config = client_config(args, parser)
    result = BenchResult(args.mode, args.count, args.size, args.concurrency)
    bench = {"send": _bench_send, "tx": _bench_tx, "consume": _bench_consume}[args.mode]

    async def main() -> int:
        await bench(args, config, result)
        summary = result.summary()
        if args.json:
            sys.stdout.write(json.dumps(summary) + "\n")
        else:
            _print_human(summary, args.server)
        return 0 if result.errors == 0 else 1

    return run_client("bench", main)
