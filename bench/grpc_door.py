"""gRPC door benchmark: the same load through the RocketMQ 5 gRPC door and the native door.

Usage::

    .venv/bin/python bench/grpc_door.py [--count N] [--repeat K] [--concurrency C]
                                   [--quick] [--cases send,tx,consume,official]
                                   [--at-commit REV] [--render]

One ``broker-lite serve`` (``--flush async``, data under ``bench/results/tmp``)
serves both doors. Every case runs the native client and a gRPC client side by
side, ``--repeat`` times, interleaved (the order flips each repetition), and
reports medians and the median of the paired ratios grpc / native (1.0 = the
gRPC door is as fast as the native one; higher is better).

Cases (bodies are 128 bytes, C requests in flight, default 64):

* ``send``: N messages. Native: ``AsyncProducer.send`` on one pipelined
  connection. gRPC: ``SendMessage`` calls on one ``grpc.aio`` channel, each
  request built the way the official client builds it (a fresh message id
  per message). A third side, the *floor*, sends the same gRPC load to a
  do-nothing ``grpc.aio`` servicer (its own process): what gRPC in Python
  costs before the door does anything.
* ``tx``: N transactions, half then COMMIT. Native:
  ``AsyncTransactionProducer.send_message_in_transaction``. gRPC:
  ``SendMessage`` (TRANSACTION) then ``EndTransaction`` (COMMIT).
* ``consume``: N messages stored first on a fresh topic, then the clock runs
  while a fresh group consumes and acks every one. Native:
  ``AsyncPushConsumer`` (pull batches of 32, C consume slots). gRPC: 4
  ``ReceiveMessage`` loops (batches of 32), each message acked by its own
  ``AckMessage`` call, C in flight, as the official push consumer does.
* ``official``: the official ``rocketmq-python-client`` Producer
  (``send_async`` with a window of W in flight, W in 1, 8, 32, 128), best W
  reported, next to the native send figure of the same run.

Full runs write ``bench/results/grpc.json`` and the generated part of
``bench/README.md``; ``--quick`` and ``--cases`` runs only print. With
``--at-commit REV`` the broker and the clients use ``broker_lite`` as
committed at REV (extracted with ``git archive``), not the working tree.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    SRC_ENV,
    TMP_DIR,
    Samples,
    add_repository_paths,
    auto_create_topics,
    code_state,
    describe_machine,
    load_average,
    machine_summary,
    run_at_commit,
    scratch_dir,
    settle,
    update_readme_section,
    utc_now,
    windowed,
    write_json,
)

# Put the code measured first on the import path (the working tree, or the
# commit extracted by --at-commit).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
sys.path.insert(0, os.environ.get(SRC_ENV) or str(REPO_ROOT))
add_repository_paths()  # after it: procgroup, from this checkout

import grpc  # noqa: E402
from rocketmq import ClientConfiguration, Credentials, Message, Producer  # noqa: E402
from rocketmq.grpc_protocol import Code, service_pb2_grpc  # noqa: E402
from rocketmq.grpc_protocol import definition_pb2 as pb  # noqa: E402
from rocketmq.grpc_protocol import service_pb2 as spb  # noqa: E402

from broker_lite.client import (  # noqa: E402
    AsyncProducer,
    AsyncPushConsumer,
    AsyncTransactionProducer,
    ConsumeResult,
    LocalTransactionState,
    ReceivedMessage,
)
from broker_lite.client import Message as NativeMessage  # noqa: E402
from procgroup import Process  # noqa: E402

RESULT_FILE = RESULTS_DIR / "grpc.json"
README = BENCH_DIR / "README.md"
BODY = b"x" * 128
OFFICIAL_WINDOWS = (1, 8, 32, 128)
_READY = re.compile(r"broker_lite ready native=(\S+) grpc=(\S+)")


# -- the broker -------------------------------------------------------------------------


@contextmanager
def broker(data_dir: Path) -> Iterator[tuple[str, str]]:
    """A ``broker-lite serve`` child on free loopback ports; yields (native, grpc)."""
    # ``-m`` puts the working directory first on the path: run where the code measured is
    source = Path(os.environ.get(SRC_ENV) or REPO_ROOT)
    argv = [sys.executable, "-m", "broker_lite", "serve", "--data-dir", str(data_dir),
            "--port", "0", "--grpc-port", "0", "--log-level", "warning",
            *auto_create_topics(source)]
    with Process(argv, log=data_dir.with_name(f"{data_dir.name}.log"), cwd=source,
                 name="broker-lite serve") as proc:
        match = proc.start().wait_for(_READY, 60)
        yield match[1], match[2]


_FLOOR_SERVER = """
import asyncio, grpc
from rocketmq.grpc_protocol import definition_pb2 as pb, service_pb2 as spb, service_pb2_grpc

class Floor:
    async def SendMessage(self, request, context):
        dict(context.invocation_metadata())
        sp = request.messages[0].system_properties
        return spb.SendMessageResponse(status=pb.Status(code=pb.Code.OK, message="OK"),
            entries=[spb.SendResultEntry(status=pb.Status(code=pb.Code.OK, message="OK"),
                                         message_id=sp.message_id)])

async def main():
    server = grpc.aio.server()
    handler = service_pb2_grpc.MessagingServiceServicer()
    handler.SendMessage = Floor().SendMessage
    service_pb2_grpc.add_MessagingServiceServicer_to_server(handler, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()

asyncio.run(main())
"""


@contextmanager
def floor_server(log: Path) -> Iterator[str]:
    """A do-nothing ``grpc.aio`` servicer answering SendMessage at once: gRPC's own cost."""
    with Process([sys.executable, "-c", _FLOOR_SERVER], log=log, name="floor server") as proc:
        yield proc.start().wait_for(r"^(127\.0\.0\.1:\d+)\n", 60)[1]


# -- native side --------------------------------------------------------------------------


async def _drive(count: int, concurrency: int, one: Callable[[int], Awaitable[Any]]) -> float:
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
        return await _drive(count, concurrency, lambda i: producer.send(msg))


async def native_tx(server: str, topic: str, count: int, concurrency: int) -> float:
    msg = NativeMessage(topic, BODY, tags="bench")
    async with AsyncTransactionProducer("bench-native-tx", _Commit(), server) as producer:

        async def one(i: int) -> None:
            sent = await producer.send_message_in_transaction(msg)
            if sent.end_error is not None:
                raise sent.end_error

        return await _drive(count, concurrency, one)


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


# -- gRPC side ------------------------------------------------------------------------------


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
        return await _drive(count, concurrency, lambda i: client.send(topic, i))
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
        return await _drive(count, concurrency, one)
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


# -- the official client -----------------------------------------------------------------------


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


# -- running ------------------------------------------------------------------------------

CASES = ("send", "tx", "consume")
NATIVE = {"send": native_send, "tx": native_tx, "consume": native_consume}
GRPC = {"send": grpc_send, "tx": grpc_tx, "consume": grpc_consume}


async def _prefill(server: str, topic: str, count: int) -> None:
    msg = NativeMessage(topic, BODY, tags="bench")
    async with AsyncProducer("bench-prefill", server) as producer:
        await _drive(count, 64, lambda i: producer.send(msg))


def run_case(case: str, native: str, endpoint: str, count: int, concurrency: int,
             repeat: int, floor: str | None = None) -> dict[str, Any]:
    """Native and gRPC runs interleaved; with ``floor``, the floor servicer's too."""
    sides = ["native", "grpc", *(["floor"] if floor else [])]
    rates: dict[str, list[float]] = {side: [] for side in sides}
    targets = {"native": native, "grpc": endpoint, "floor": floor or ""}
    for rep in range(repeat):
        for side in sides if rep % 2 == 0 else sides[::-1]:
            topic = f"Bench{case.title()}{side.title()}{rep}{uuid.uuid4().hex[:6]}"
            if case == "consume":
                asyncio.run(_prefill(native, topic, count))
            settle()
            fn = NATIVE[case] if side == "native" else GRPC[case]
            seconds = asyncio.run(fn(targets[side], topic, count, concurrency))
            rates[side].append(count / seconds)
            print(f"  {case:8} rep {rep + 1}/{repeat} {side:6} {count / seconds:10,.0f} /s",
                  flush=True)
    ratios = [g / n for g, n in zip(rates["grpc"], rates["native"], strict=True)]
    result = {"case": case, "count": count, "concurrency": concurrency, **rates,
              "ratios": ratios, "native_median": Samples(rates["native"]).median,
              "grpc_median": Samples(rates["grpc"]).median,
              "ratio_median": Samples(ratios).median,
              "ratio_range": [min(ratios), max(ratios)]}
    if floor:
        to_floor = [g / f for g, f in zip(rates["grpc"], rates["floor"], strict=True)]
        result.update(floor_median=Samples(rates["floor"]).median, floor_ratios=to_floor,
                      floor_ratio_median=Samples(to_floor).median)
    return result


def run_official(endpoint: str, count: int) -> dict[str, Any]:
    rates: dict[int, float] = {}
    for window in OFFICIAL_WINDOWS:
        settle()
        seconds = official_send(endpoint, f"BenchOfficial{window}", count, window)
        rates[window] = count / seconds
        print(f"  official send, window {window:3}: {rates[window]:10,.0f} msgs/s", flush=True)
    best = max(rates, key=lambda w: rates[w])
    return {"count": count, "rates": {str(w): r for w, r in rates.items()},
            "best_window": best, "best_rate": rates[best]}


# -- output -------------------------------------------------------------------------------

LABELS = {"send": "send (msgs/s)", "tx": "transaction: half + commit (tx/s)",
          "consume": "consume + ack (msgs/s)"}


def _code_text(code: dict[str, Any]) -> str:
    commit = (code.get("commit") or "?")[:12]
    if code.get("source") == "commit":
        return f"as committed at `{commit}` (--at-commit)"
    dirty = code.get("dirty_paths") or []
    return f"in the working tree at `{commit}`" + (
        f", with uncommitted paths: {', '.join(dirty[:6])}" if dirty else "")


def render(data: dict[str, Any]) -> str:
    lines = [
        f"Last full run: {data['finished']}, {data['repeat']} repetitions (medians), "
        f"{data['concurrency']} requests in flight, 128 B bodies, `--flush async`.",
        f"Code measured: broker_lite {_code_text(data['git'])}.",
        f"Machine: {machine_summary(data['machine'])}; load average "
        f"{data['load_start'][0] if data['load_start'] else '?'} at start, "
        f"{data['load_end'][0] if data['load_end'] else '?'} at end (1 min).",
        "",
        "| case | count | native door | gRPC door | gRPC / native | ratio range |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for result in data["cases"]:
        low, high = result["ratio_range"]
        lines.append(
            f"| {LABELS[result['case']]} | {result['count']:,} | "
            f"{result['native_median']:,.0f} | {result['grpc_median']:,.0f} | "
            f"{result['ratio_median']:.2f} | {low:.2f}-{high:.2f} |")
    for result in data["cases"]:
        if "floor_median" in result:
            lines += ["", f"gRPC floor: the same gRPC send load against a `grpc.aio` servicer "
                          f"that answers at once and stores nothing: "
                          f"{result['floor_median']:,.0f} msgs/s; the door reaches "
                          f"**{result['floor_ratio_median']:.2f}** of it."]
    official = data.get("official")
    if official:
        rates = ", ".join(f"W={w}: {r:,.0f}" for w, r in official["rates"].items())
        native_send = next((c["native_median"] for c in data["cases"] if c["case"] == "send"),
                           None)
        versus = (f"; {official['best_rate'] / native_send:.2f} x the native send above"
                  if native_send else "")
        lines += ["", f"Official `rocketmq-python-client` Producer (`send_async`, W sends in "
                      f"flight, {official['count']:,} messages each): {rates} msgs/s. Best: "
                      f"**{official['best_rate']:,.0f} msgs/s at W={official['best_window']}**"
                      f"{versus}."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="messages per run")
    parser.add_argument("--official-count", type=int, default=4_000,
                        help="messages per official-client run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cases", default="", help="comma-separated subset (prints only)")
    parser.add_argument("--quick", action="store_true", help="small counts, prints only")
    parser.add_argument("--render", action="store_true",
                        help="rewrite the README section from grpc.json, measure nothing")
    parser.add_argument("--at-commit", metavar="REV", default="",
                        help="measure broker_lite as committed at REV (extracted with git "
                             "archive), not the working tree")
    args = parser.parse_args()
    if args.at_commit and SRC_ENV not in os.environ:
        return run_at_commit(__file__, args.at_commit, sys.argv[1:])
    if args.render:
        update_readme_section(README, "grpc", render(json_load(RESULT_FILE)))
        return 0
    if args.quick:
        args.count, args.official_count, args.repeat = 2_000, 1_000, 1
    wanted = [c for c in (args.cases.split(",") if args.cases else [*CASES, "official"]) if c]
    data: dict[str, Any] = {
        "benchmark": "grpc", "started": utc_now(), "count": args.count,
        "official_count": args.official_count, "repeat": args.repeat,
        "concurrency": args.concurrency, "machine": describe_machine(TMP_DIR),
        "git": code_state(_broker_lite_dir()), "load_start": load_average(), "cases": [],
    }
    print(f"gRPC door vs native door: {machine_summary(data['machine'])}")
    with scratch_dir("grpc") as root, broker(root / "broker") as (native, endpoint):
        print(f"broker: native={native} grpc={endpoint}")
        for case in CASES:
            if case not in wanted:
                continue
            if case == "send":
                with floor_server(root / "floor.log") as floor:
                    data["cases"].append(run_case(case, native, endpoint, args.count,
                                                  args.concurrency, args.repeat, floor))
            else:
                data["cases"].append(run_case(case, native, endpoint, args.count,
                                              args.concurrency, args.repeat))
        if "official" in wanted:
            data["official"] = run_official(endpoint, args.official_count)
    data["load_end"] = load_average()
    data["finished"] = utc_now()
    text = render(data)
    print()
    print(text)
    if not args.quick and not args.cases:
        write_json(RESULT_FILE, data)
        update_readme_section(README, "grpc", text)
        print(f"\nwrote {RESULT_FILE.relative_to(REPO_ROOT)} and the grpc section of "
              f"{README.relative_to(REPO_ROOT)}")
    return 0


def _broker_lite_dir() -> Path:
    import broker_lite

    return Path(broker_lite.__file__).resolve().parent


def json_load(path: Path) -> dict[str, Any]:
    import json

    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


if __name__ == "__main__":
    sys.exit(main())
