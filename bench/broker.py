"""Broker benchmark: broker_lite against Redis Streams, the same load on both.

Usage::

    .venv/bin/python bench/broker.py [--messages N] [--repeat K] [--quick] [--cases a,b]
                                     [--profile] [--at-commit REV] [--render]

It starts ``broker-lite serve`` and ``redis-server`` as child processes, each
with its data under ``bench/results/tmp/`` (Redis with its append-only file
on), and drives both from one asyncio load generator in this process: the
broker through ``broker_lite.client``, Redis through ``redis.asyncio``
(redis-py). Both get the same structure: a fixed number of requests kept in
flight (the *window*), each carrying one message or a batch of them, 1 KiB
bodies. The clock runs from the first request to the last answer; connecting,
warming up and checking the result are outside it.

Flush settings are matched: the broker's ``--flush async`` (acknowledged in
the page cache, fsync every 0.5 s) against ``appendfsync everysec``, and
``--flush sync`` (acknowledged after the group-commit fsync) against
``appendfsync always``.

Cases (``-async`` / ``-sync`` is the flush pairing):

* ``send-batch``: ``AsyncProducer.send_batch`` of 64 messages, 8 requests in
  flight on the one connection. Redis: a pipeline of 64 ``XADD`` (no
  MULTI), 8 pipelines in flight (redis-py takes one pooled connection each).
* ``send-single``: ``AsyncProducer.send``, one message per request, 64 in
  flight on the one connection. Redis: one ``XADD`` per request, 64 in flight.
* ``tx-batch``: transactions of one message: ``SEND_BATCH`` of 64 halves, then
  ``resolve_transactions`` (``END_TRANSACTION_BATCH``) committing the 64, as
  the outbox relay does; 8 such pairs in flight. Redis: a pipeline of 64
  ``XADD`` to a pending stream (the halves), then one ``MULTI``/``EXEC``
  pipeline with, per transaction, ``XADD`` of the message to the visible
  stream and ``XADD`` of a marker naming the half to an op stream.
* ``tx-single``: ``send_message_in_transaction`` (half, a local transaction
  that commits at once, end-transaction), 64 in flight. Redis: ``XADD`` of
  the half, then ``MULTI`` / the two ``XADD`` / ``EXEC``, 64 in flight.
* ``consume-K``: read back N preloaded messages from 4 queues (4 streams for
  Redis), one reader per queue, ``K`` messages per request:
  ``AsyncPullConsumer.pull`` against ``XREAD COUNT K`` from the last id read.

Every case is repeated (``--repeat``), ours and Redis back to back, the order
flipping each repetition; medians and the median of the paired ratios
(ours / Redis throughput) are reported.

Full runs write ``bench/results/broker.json`` and the generated part of
``bench/README.md``; ``--quick`` and ``--cases`` runs only print.
``--at-commit REV`` measures ``broker_lite`` (client and server) as
committed at REV. ``--profile`` also samples the broker process and this
process with py-spy during one extra run of ours per case and prints where
the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import _pyspy as pyspy
import redis
import redis.asyncio as aioredis
from _common import (
    TMP_DIR,
    Samples,
    add_repository_paths,
    auto_create_topics,
    benchmark_main,
    code_state,
    describe_machine,
    load_average,
    machine_summary,
    scratch_dir,
    settle,
    source_digest,
    utc_now,
    windowed,
)
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from broker_lite.client import (
    AsyncProducer,
    AsyncPullConsumer,
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    ReceivedMessage,
    TransactionEnd,
)
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m

add_repository_paths()

from procgroup import ExitedEarly, Process  # noqa: E402

BODY_SIZE = 1024
#: queues of every broker topic (the broker's default), streams per consume case
QUEUES = 4
#: messages (or transactions) per request in the batch cases, and batch requests in flight
BATCH = 64
BATCH_WINDOW = 8
#: requests in flight in the one-per-request cases
SINGLE_WINDOW = 64
PULL_SIZES = (32, 256)
#: messages or transactions per run, as a fraction of --messages, by case kind and flush
COUNT_SHARE: dict[str, float] = {
    "send-batch-async": 1.0, "send-single-async": 0.25,
    "send-batch-sync": 0.5, "send-single-sync": 0.1,
    "tx-batch-async": 0.25, "tx-single-async": 0.05,
    "tx-batch-sync": 0.25, "tx-single-sync": 0.05,
    "consume-32": 1.0, "consume-256": 1.0,
}
#: (case, form) -> goal; "ratio" goals are ours/Redis, "rate" goals are per second
TARGETS: list[tuple[str, str, float, str]] = [
    ("send-batch-async", "ratio", 0.5,
     "(a) send, async flush, batches: ours / Redis pipelined XADD"),
    ("send-single-async", "ratio-vs-batch", 0.5,
     "(a) send, async flush, one message per request: ours / Redis pipelined XADD"),
    ("tx-batch-async", "rate", 20_000.0, "(b) transactions, async flush, batch forms, tx/s"),
    ("tx-single-async", "rate", 20_000.0,
     "(b) transactions, async flush, send_message_in_transaction, tx/s"),
    ("tx-batch-sync", "rate", 8_000.0, "(b) transactions, sync flush, batch forms, tx/s"),
    ("tx-single-sync", "rate", 8_000.0,
     "(b) transactions, sync flush, send_message_in_transaction, tx/s"),
]
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
REQUEST_TIMEOUT = 60.0
GROUP = "bench-broker"

#: set in the child process of ``--at-commit``: where the extracted code is, and its commit

FlushMode = Literal["async", "sync"]
Kind = Literal["send", "tx", "consume"]
REDIS_FSYNC: dict[FlushMode, str] = {"async": "everysec", "sync": "always"}
console = Console(width=None if sys.stdout.isatty() else 160)
BODY = b"x" * BODY_SIZE
#: the one field of every stream entry (typed loosely: redis-py's field types are narrow)
FIELDS: dict[Any, Any] = {b"body": BODY}


# -- the servers -----------------------------------------------------------------------


class ServerProcess(Process):
    """A server started as a child process (procgroup), with its log file and CPU time."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *, cwd: Path) -> None:
        log_path.unlink(missing_ok=True)
        super().__init__(argv, log=log_path, cwd=cwd, name=name)
        self._ticks = os.sysconf("SC_CLK_TCK")
        self.start()

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the process (all its threads) has used so far."""
        with open(f"/proc/{self.pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._ticks

    def stop(self, sig: signal.Signals | None = signal.SIGTERM,
             timeout: float = STOP_TIMEOUT) -> int | None:
        return super().stop(sig, timeout)


_BROKER_READY = re.compile(r"^broker_lite ready native=(\S+)", re.MULTILINE)


def start_broker(root: Path, flush: FlushMode) -> tuple[ServerProcess, str]:
    """``broker-lite serve --port 0`` on a fresh data dir; returns it and its native address.

    Run as ``python -m broker_lite`` from the scratch directory, so that the
    code measured is what this process imports (``--at-commit`` sets
    ``PYTHONPATH``; the current directory would otherwise come first).
    """
    data_dir = root / f"broker-{flush}"
    shutil.rmtree(data_dir, ignore_errors=True)
    argv = [sys.executable, "-m", "broker_lite", "serve", "--data-dir", str(data_dir),
            "--port", "0", "--flush", flush, "--log-level", "warning", *auto_create_topics()]
    server = ServerProcess(f"broker-lite serve --flush {flush}", argv,
                           root / f"broker-{flush}.log", cwd=root)
    try:
        return server, server.wait_for(_BROKER_READY, READY_TIMEOUT).group(1)
    except BaseException:
        server.stop()
        raise


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(root: Path, flush: FlushMode) -> tuple[ServerProcess, int]:
    """``redis-server`` with AOF on (``appendfsync`` matched to ``flush``), no RDB snapshots,
    no automatic AOF rewrite (a fork in the middle of a run); returns it and its port."""
    data_dir = root / f"redis-{flush}"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    for _attempt in range(3):  # a free port may be taken between probing and binding
        port = free_port()
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes", "--appendfsync", REDIS_FSYNC[flush],
                "--auto-aof-rewrite-percentage", "0", "--dir", str(data_dir),
                "--daemonize", "no", "--loglevel", "warning"]
        server = ServerProcess(f"redis-server appendfsync {REDIS_FSYNC[flush]}", argv,
                               root / f"redis-{flush}.log", cwd=data_dir)
        try:
            with contextlib.closing(redis.Redis(host="127.0.0.1", port=port,
                                                socket_connect_timeout=0.5)) as client:
                server.wait_until(client.ping, READY_TIMEOUT, what="PING", interval=0.02,
                                  ignore=(redis.exceptions.ConnectionError,
                                          redis.exceptions.BusyLoadingError))
            return server, port
        except ExitedEarly:
            server.stop()  # most likely the port was taken: another one
        except BaseException:
            server.stop()
            raise
    raise RuntimeError("redis-server did not start (three ports tried)")


def redis_version() -> str:
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), out.strip())


def redis_py_parser() -> str:
    """Which reply parser redis-py uses: its own, in Python, unless hiredis is installed."""
    try:
        import hiredis  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return "pure-Python parser, no hiredis"
    return "hiredis parser"


# -- the load generator ----------------------------------------------------------------


def chunk(index: int, count: int, per_request: int) -> int:
    """How many messages request ``index`` carries (the last one may carry fewer)."""
    return min(per_request, count - index * per_request)


def requests_for(count: int, per_request: int) -> int:
    return -(-count // per_request)


class Workload(Protocol):
    """One side of a case. Only :meth:`load` is timed."""

    async def open(self) -> None: ...

    async def load(self) -> None: ...

    async def verify(self) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CaseSpec:
    """What one case does; ``per_request`` is the batch (or pull) size."""

    name: str
    kind: Kind
    flush: FlushMode
    per_request: int
    window: int
    count: int
    ours: str
    redis: str


class _Commit:
    """A local transaction that commits at once (the benchmark's listener)."""

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE


# -- broker_lite's side ------------------------------------------------------------------


class BrokerSend:
    """``send_batch`` (per_request > 1) or ``send`` with ``window`` requests in flight."""

    def __init__(self, address: str, spec: CaseSpec, topic: str) -> None:
        self.spec = spec
        self.producer = AsyncProducer(GROUP, address, timeout=REQUEST_TIMEOUT)
        self.message = Message(topic, BODY)
        self.stored = 0

    async def open(self) -> None:
        await self.producer.start()
        await self.producer.send(self.message)  # warm up: the topic exists, the path is hot

    async def load(self) -> None:
        spec, producer, message = self.spec, self.producer, self.message

        async def one(index: int) -> None:
            if spec.per_request == 1:
                await producer.send(message)
                self.stored += 1
            else:
                n = chunk(index, spec.count, spec.per_request)
                results = await producer.send_batch([message] * n)
                self.stored += len(results)  # not "+= len(await ...)": that reads first

        await windowed(requests_for(spec.count, spec.per_request), spec.window, one)

    async def verify(self) -> None:
        if self.stored != self.spec.count:
            raise RuntimeError(f"broker stored {self.stored} of {self.spec.count} messages")

    async def close(self) -> None:
        await self.producer.shutdown()


class BrokerTx:
    """Half + commit per transaction: the batch forms, or ``send_message_in_transaction``."""

    def __init__(self, address: str, spec: CaseSpec, topic: str) -> None:
        self.spec = spec
        self.producer = AsyncTransactionProducer(GROUP, _Commit(), address,
                                                 timeout=REQUEST_TIMEOUT)
        self.message = Message(topic, BODY)
        self.committed = 0

    async def open(self) -> None:
        await self.producer.start()
        await self.producer.send_message_in_transaction(self.message)  # warm up

    async def load(self) -> None:
        spec = self.spec
        one = self._single if spec.per_request == 1 else self._batch
        await windowed(requests_for(spec.count, spec.per_request), spec.window, one)

    async def _single(self, index: int) -> None:
        sent = await self.producer.send_message_in_transaction(self.message)
        if sent.end_outcome != "committed":
            raise RuntimeError(f"transaction {sent.transaction_id} ended {sent.end_outcome}: "
                               f"{sent.end_error}")
        self.committed += 1

    async def _batch(self, index: int) -> None:
        """What the outbox relay does: SEND_BATCH of halves, then END_TRANSACTION_BATCH."""
        n = chunk(index, self.spec.count, self.spec.per_request)
        producer = self.producer
        halves = await producer.session.request(
            RequestCode.SEND_BATCH,
            m.SendBatchRequest(producer_group=producer.group,
                               messages=[self.message.to_wire(transactional=True)
                                         for _ in range(n)]),
            m.SendBatchResponse)
        ends: list[TransactionEnd] = []
        for item in halves.results:
            half = item.result
            if half is None:
                raise RuntimeError(f"half refused: code {item.code} {item.error}")
            ends.append(TransactionEnd(half.transaction_id or half.msg_id,
                                       LocalTransactionState.COMMIT_MESSAGE,
                                       half.commit_log_offset, half.queue_offset, half.msg_id))
        for outcome in await producer.resolve_transactions(ends):
            if not isinstance(outcome, m.EndTransactionResponse) or (
                    outcome.outcome != "committed"):
                raise RuntimeError(f"end-transaction answered {outcome!r}")
            self.committed += 1

    async def verify(self) -> None:
        if self.committed != self.spec.count:
            raise RuntimeError(f"broker committed {self.committed} of {self.spec.count}")

    async def close(self) -> None:
        await self.producer.shutdown()


class BrokerConsume:
    """One reader per queue, ``per_request`` messages per pull, from offset 0."""

    def __init__(self, address: str, spec: CaseSpec, topic: str) -> None:
        self.spec = spec
        self.topic = topic
        self.consumer = AsyncPullConsumer(f"{GROUP}-consume", address, timeout=REQUEST_TIMEOUT)
        self.read = 0
        self.bytes = 0

    async def open(self) -> None:
        await self.consumer.start()
        await self.consumer.pull(self.topic, 0, 0, 1)  # warm up

    async def load(self) -> None:
        per_queue = self.spec.count // QUEUES
        consumer, topic, size = self.consumer, self.topic, self.spec.per_request

        async def reader(queue_id: int) -> None:
            offset = got = 0
            while got < per_queue:
                result = await consumer.pull(topic, queue_id, offset, min(size, per_queue - got))
                if not result.messages:
                    raise RuntimeError(f"queue {queue_id}: {result.status} at {offset}")
                got += len(result.messages)
                self.bytes += sum(len(msg.body) for msg in result.messages)
                offset = result.next_offset
            self.read += got

        await asyncio.gather(*(reader(q) for q in range(QUEUES)))

    async def verify(self) -> None:
        if self.read != self.spec.count or self.bytes != self.spec.count * BODY_SIZE:
            raise RuntimeError(f"broker read {self.read} of {self.spec.count} messages")

    async def close(self) -> None:
        await self.consumer.shutdown()


async def preload_broker(address: str, topic: str, count: int) -> None:
    """``count`` messages on ``topic``, spread evenly over its queues (round robin)."""
    async with AsyncProducer(GROUP, address, timeout=REQUEST_TIMEOUT) as producer:
        message = Message(topic, BODY)

        async def one(index: int) -> None:
            await producer.send_batch([message] * chunk(index, count, BATCH))

        await windowed(requests_for(count, BATCH), BATCH_WINDOW, one)


# -- Redis's side --------------------------------------------------------------------------


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


# -- measuring -----------------------------------------------------------------------------


@dataclass(slots=True)
class Measurement:
    """One timed run: wall seconds, and CPU seconds of the server and of this process."""

    seconds: float
    server_cpu: float
    client_cpu: float


@dataclass(slots=True)
class Side:
    what: str
    samples: list[Measurement] = field(default_factory=list)

    def seconds(self) -> Samples:
        return Samples([s.seconds for s in self.samples])

    def rate(self, count: int) -> float:
        return count / self.seconds().median

    def cpu_per_message(self, count: int, which: Literal["server", "client"]) -> float:
        """Median CPU microseconds per message (or transaction)."""
        values = [(s.server_cpu if which == "server" else s.client_cpu) / count * 1e6
                  for s in self.samples]
        return Samples(values).median


@dataclass(slots=True)
class Comparison:
    spec: CaseSpec
    ours: Side
    redis: Side

    @property
    def name(self) -> str:
        return self.spec.name

    def ratios(self) -> Samples:
        """Paired ours/Redis throughput ratios (Redis seconds / our seconds)."""
        return Samples([r.seconds / o.seconds
                        for o, r in zip(self.ours.samples, self.redis.samples, strict=True)])


@dataclass(slots=True)
class Servers:
    """A broker and a Redis with matched flush settings."""

    flush: FlushMode
    broker: ServerProcess
    address: str
    redis: ServerProcess
    port: int

    def stop(self) -> None:
        for server in (self.broker, self.redis):
            try:
                server.stop()
            except Exception as exc:  # keep stopping the other one
                console.print(f"[yellow]warning:[/] stopping {server.name}: {exc}")


@contextlib.contextmanager
def servers(root: Path, flush: FlushMode) -> Iterator[Servers]:
    broker, address = start_broker(root, flush)
    try:
        redis_server, port = start_redis(root, flush)
    except BaseException:
        broker.stop()
        raise
    pair = Servers(flush, broker, address, redis_server, port)
    try:
        yield pair
    finally:
        pair.stop()


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


def build_cases(messages: int) -> list[Comparison]:
    specs: list[CaseSpec] = []
    for flush in ("async", "sync"):
        fsync = REDIS_FSYNC[flush]
        specs += [
            CaseSpec(f"send-batch-{flush}", "send", flush, BATCH, BATCH_WINDOW, 0,
                     f"send_batch of {BATCH}, {BATCH_WINDOW} in flight, --flush {flush}",
                     f"pipeline of {BATCH} XADD, {BATCH_WINDOW} in flight, appendfsync {fsync}"),
            CaseSpec(f"send-single-{flush}", "send", flush, 1, SINGLE_WINDOW, 0,
                     f"send, {SINGLE_WINDOW} in flight, --flush {flush}",
                     f"XADD, {SINGLE_WINDOW} in flight, appendfsync {fsync}"),
            CaseSpec(f"tx-batch-{flush}", "tx", flush, BATCH, BATCH_WINDOW, 0,
                     f"SEND_BATCH of {BATCH} halves + END_TRANSACTION_BATCH, {BATCH_WINDOW} "
                     f"in flight, --flush {flush}",
                     f"pipeline of {BATCH} XADD half, then MULTI of {BATCH} x (XADD message, "
                     f"XADD op) EXEC, {BATCH_WINDOW} in flight, appendfsync {fsync}"),
            CaseSpec(f"tx-single-{flush}", "tx", flush, 1, SINGLE_WINDOW, 0,
                     f"send_message_in_transaction, {SINGLE_WINDOW} in flight, --flush {flush}",
                     f"XADD half, then MULTI (XADD message, XADD op) EXEC, {SINGLE_WINDOW} in "
                     f"flight, appendfsync {fsync}"),
        ]
    for size in PULL_SIZES:
        specs.append(CaseSpec(
            f"consume-{size}", "consume", "async", size, QUEUES, 0,
            f"AsyncPullConsumer.pull of {size}, one reader per queue ({QUEUES})",
            f"XREAD COUNT {size}, one reader per stream ({QUEUES})"))
    cases = []
    for spec in specs:
        count = int(messages * COUNT_SHARE[spec.name])
        count = max(spec.per_request * QUEUES, count - count % (spec.per_request * QUEUES))
        spec = CaseSpec(spec.name, spec.kind, spec.flush, spec.per_request, spec.window, count,
                        spec.ours, spec.redis)
        cases.append(Comparison(spec, Side(spec.ours), Side(spec.redis)))
    return cases


# -- profiling -----------------------------------------------------------------------------

#: own time per layer, by the path of the innermost frame (py-spy shortens paths to
#: the package part); first match wins
LAYERS: list[tuple[str, Sequence[str]]] = [
    ("storage", ("broker_lite/storage/",)),
    ("core: transactions", ("broker_lite/core/transactions.py",)),
    ("core: broker, topics", ("broker_lite/core/",)),
    ("protocol", ("broker_lite/protocol/",)),
    ("server", ("broker_lite/server/", "broker_lite/serving/", "broker_lite/runtime/")),
    ("client", ("broker_lite/client/",)),
    ("asyncio, sockets", ("asyncio/", "selectors.py", "socket.py")),
    ("load generator", ("bench/", "broker.py", "redis/")),
]
#: profiled runs do this many times the work of a measured run (enough samples)
PROFILE_SCALE = 3


def run_profiles(pair: Servers, cases: Sequence[Comparison], out_dir: Path,
                 top: int = 16) -> dict[str, Any]:
    """One extra run of ours per case, py-spy sampling the broker process and this one
    (GIL-holding samples only) during the timed part."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for case in cases:
        spec = case.spec
        if spec.kind != "consume":  # consume reads what was preloaded: no more
            spec = dataclasses.replace(spec, count=spec.count * PROFILE_SCALE)
        server_out = out_dir / f"{spec.name}-server.txt"
        client_out = out_dir / f"{spec.name}-client.txt"

        @contextlib.contextmanager
        def sampling(server_out: Path = server_out,
                     client_out: Path = client_out) -> Iterator[None]:
            with pyspy.record(pair.broker.pid, server_out), \
                    pyspy.record(os.getpid(), client_out):
                yield

        sample = measure_once(broker_workload(spec, pair), pair.broker, around_load=sampling)
        profile: dict[str, Any] = {"count": spec.count, "seconds": sample.seconds,
                                   "server_cpu_s": sample.server_cpu,
                                   "client_cpu_s": sample.client_cpu}
        for side, path in (("server", server_out), ("client", client_out)):
            stacks = pyspy.read_raw(path)
            profile[side] = {**pyspy.by_function(stacks, top),
                             "layers": pyspy.by_layer(stacks, LAYERS), "file": str(path)}
        results[spec.name] = profile
        print_profile(spec.name, profile)
    return results


def print_profile(name: str, prof: dict[str, Any]) -> None:
    count = prof["count"]
    console.rule(f"profile: {name}, {count / prof['seconds']:,.0f}/s under py-spy; CPU per "
                 f"message: broker {prof['server_cpu_s'] / count * 1e6:.1f} us, load "
                 f"generator {prof['client_cpu_s'] / count * 1e6:.1f} us")
    for side in ("server", "client"):
        data = prof[side]
        layers = ", ".join(f"{layer} {100 * share:.0f}%" for layer, share in data["layers"])
        table = Table(title=f"{name}, {'broker' if side == 'server' else 'load generator'}: "
                            f"{data['samples']} samples holding the GIL; by layer: {layers}",
                      title_justify="left")
        table.add_column("own %", justify="right")
        table.add_column("function (own time)")
        table.add_column("incl %", justify="right")
        table.add_column("function (inclusive)")
        own, incl = data["own"], data["inclusive"]
        for i in range(max(len(own), len(incl))):
            o = own[i] if i < len(own) else ("", 0.0)
            c = incl[i] if i < len(incl) else ("", 0.0)
            table.add_row(f"{100 * o[1]:.1f}" if o[0] else "", o[0],
                          f"{100 * c[1]:.1f}" if c[0] else "", c[0])
        console.print(table)


# -- code under test ---------------------------------------------------------------------


#: the parts of broker_lite on the measured path (others, e.g. the gRPC door, are not)
MEASURED_PARTS = ("client", "core", "protocol", "server", "storage")


def package_dir() -> Path:
    """The broker_lite directory actually imported (found from a module file: an editable
    install may make ``broker_lite`` itself a namespace package without ``__file__``)."""
    return Path(inspect.getfile(AsyncProducer)).resolve().parent.parent


def measured_digest() -> str:
    """SHA-256 over the measured parts of broker_lite (see :data:`MEASURED_PARTS`)."""
    return hashlib.sha256("".join(
        source_digest(package_dir() / part) for part in MEASURED_PARTS).encode()).hexdigest()


# -- reporting -------------------------------------------------------------------------------


def unit(spec: CaseSpec) -> str:
    return "tx" if spec.kind == "tx" else "msg"


def case_result(case: Comparison) -> dict[str, Any]:
    count = case.spec.count

    def side(s: Side) -> dict[str, Any]:
        secs = s.seconds()
        return {
            "what": s.what,
            "median_seconds": secs.median,
            "per_s": s.rate(count),
            "spread": secs.spread,
            "server_cpu_us_per_item": s.cpu_per_message(count, "server"),
            "client_cpu_us_per_item": s.cpu_per_message(count, "client"),
            "samples_seconds": secs.values,
            "samples_server_cpu_s": [x.server_cpu for x in s.samples],
            "samples_client_cpu_s": [x.client_cpu for x in s.samples],
        }

    ratios = case.ratios()
    spec = case.spec
    return {
        "name": spec.name, "kind": spec.kind, "flush": spec.flush,
        "redis_appendfsync": REDIS_FSYNC[spec.flush], "per_request": spec.per_request,
        "window": spec.window, "count": count, "unit": unit(spec),
        "ours": side(case.ours), "redis": side(case.redis),
        "ratio_meaning": "ours throughput / Redis throughput, median over paired repetitions",
        "ratio_median": ratios.median, "ratio_samples": ratios.values,
    }


def target_results(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {c["name"]: c for c in cases}
    out: list[dict[str, Any]] = []
    for name, form, goal, text in TARGETS:
        case = by_name.get(name)
        if case is None:
            continue
        if form == "ratio":
            value = case["ratio_median"]
        elif form == "ratio-vs-batch":
            batch = by_name.get(name.replace("single", "batch"))
            if batch is None:
                continue
            value = case["ours"]["per_s"] / batch["redis"]["per_s"]
        else:
            value = case["ours"]["per_s"]
        out.append({"case": name, "description": text, "form": form, "target": goal,
                    "measured": value, "met": value >= goal})
    return out


def _fmt_target(value: float, form: str) -> str:
    return f"{value:.2f}x" if form.startswith("ratio") else f"{value:,.0f}"


def results_table(cases: Sequence[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("case", "count", "ours /s", "Redis /s", "ours/Redis", "ratio range",
                "broker CPU us", "client CPU us (ours)", "Redis CPU us", "client CPU us (Redis)"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for c in cases:
        o, r = c["ours"], c["redis"]
        table.add_row(
            c["name"], f"{c['count']:,}", f"{o['per_s']:,.0f}", f"{r['per_s']:,.0f}",
            f"{c['ratio_median']:.2f}",
            f"{min(c['ratio_samples']):.2f}-{max(c['ratio_samples']):.2f}",
            f"{o['server_cpu_us_per_item']:.1f}", f"{o['client_cpu_us_per_item']:.1f}",
            f"{r['server_cpu_us_per_item']:.1f}", f"{r['client_cpu_us_per_item']:.1f}")
    return table


def targets_table(targets: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="targets", title_justify="left")
    for col in ("target", "goal", "measured", "met"):
        table.add_column(col, justify="left" if col == "target" else "right")
    for t in targets:
        table.add_row(t["description"], _fmt_target(t["target"], t["form"]),
                      _fmt_target(t["measured"], t["form"]),
                      "[green]yes[/]" if t["met"] else "[red]no[/]")
    return table


def code_summary(code: dict[str, Any]) -> str:
    commit = (code.get("commit") or "?")[:12]
    if code["source"] == "commit":
        return f"broker_lite as committed at `{commit}` (--at-commit)"
    dirty = [p for p in code.get("dirty_paths", [])
             if p.startswith(tuple(f"broker_lite/{part}" for part in MEASURED_PARTS))]
    text = f"working tree at `{commit}`"
    if dirty:
        text += f", with uncommitted changes to {', '.join(dirty)}"
    if code.get("changed_during_run"):
        text += " (changed during the run)"
    return text


def markdown_section(result: dict[str, Any]) -> str:
    params = result["parameters"]
    load = result["load_average"]
    lines = [
        f"Last full run: {result['generated_at']}, {params['repeat']} repetitions (medians).",
        f"Code measured: {code_summary(result['code'])}.",
        f"Machine: {machine_summary(result['machine'])}; load average "
        f"{(load.get('start') or ['?'])[0]} at start, {(load.get('end') or ['?'])[0]} at end "
        "(1 min, the benchmark included).",
        f"Redis {params['redis_version']}, redis-py {params['redis_py_version']} "
        f"({params['redis_py_parser']}). Bodies of {params['body_size']} B. CPU columns "
        "are CPU microseconds per message (per transaction for `tx-*`), all threads of the "
        "process, medians.",
        "",
        "| case | count | ours /s | Redis /s | ours/Redis | ratio range | broker CPU us "
        "| client CPU us | Redis CPU us | client CPU us (Redis) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["cases"]:
        o, r = c["ours"], c["redis"]
        lines.append(
            f"| {c['name']} | {c['count']:,} | {o['per_s']:,.0f} | {r['per_s']:,.0f} | "
            f"{c['ratio_median']:.2f} | {min(c['ratio_samples']):.2f}-"
            f"{max(c['ratio_samples']):.2f} | {o['server_cpu_us_per_item']:.1f} | "
            f"{o['client_cpu_us_per_item']:.1f} | {r['server_cpu_us_per_item']:.1f} | "
            f"{r['client_cpu_us_per_item']:.1f} |")
    lines += ["", "| target | goal | measured | met |", "|---|---:|---:|:---:|"]
    for t in result["targets"]:
        lines.append(f"| {t['description']} | {_fmt_target(t['target'], t['form'])} | "
                     f"{_fmt_target(t['measured'], t['form'])} | "
                     f"{'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=100_000,
                        help="messages per send-batch-async run; other cases run a share of "
                             "it (see COUNT_SHARE); default 100000")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 12000 messages, 2 repetitions; no files written")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names to run (no files written)")
    parser.add_argument("--at-commit", metavar="REV", default="",
                        help="measure broker_lite as committed at REV, not the working tree")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the README section from bench/results/broker.json")
    parser.add_argument("--profile", action="store_true",
                        help="also run ours once more per case under py-spy (broker process "
                             "and load generator) and print where the time goes")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.repeat = 12_000, 2
    return args


def select(cases: list[Comparison], names: str) -> list[Comparison]:
    if not names:
        return cases
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {c.name for c in cases}
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(c.name for c in cases)}")
    return [c for c in cases if c.name in wanted]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    code = code_state(package_dir(), {"broker_lite_digest": measured_digest()})
    load_before = load_average()
    if load_before and load_before[0] > 0.5 * (os.cpu_count() or 1):
        console.print(f"[yellow]warning:[/] load average {load_before[0]} at start: other work "
                      "on this machine will add noise", highlight=False)
    cases = select(build_cases(args.messages), args.cases)
    profiles: dict[str, Any] = {}
    with scratch_dir("broker") as root:
        machine = describe_machine(root)
        console.print(f"[bold]broker benchmark[/] on {machine_summary(machine)}",
                      highlight=False)
        console.print(f"code: {code_summary(code)}; redis-server {redis_version()}, redis-py "
                      f"{redis.__version__} ({redis_py_parser()}); data dir {root}",
                      highlight=False)
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        modes: list[FlushMode] = ["async", "sync"]
        with progress:
            task = progress.add_task("starting", total=args.repeat * len(cases) * 2)
            for flush in modes:
                mode_cases = [c for c in cases if c.spec.flush == flush]
                if not mode_cases:
                    continue
                progress.update(task, description=f"starting broker and redis ({flush})")
                with servers(root, flush) as pair:
                    run_mode(pair, mode_cases, args.repeat, progress, task)
                    if args.profile:
                        progress.stop()
                        profiles.update(run_profiles(pair, mode_cases,
                                                     TMP_DIR / "broker-profiles"))
                        progress.start()
    results = [case_result(c) for c in cases]
    console.print(results_table(results, f"median of {args.repeat} runs; ratio = median of "
                                         "paired ours/Redis throughput; CPU us per message"))
    targets = target_results(results)
    if targets:
        console.print(targets_table(targets))
    code["changed_during_run"] = measured_digest() != code["broker_lite_digest"]
    if code["changed_during_run"]:
        console.print("[yellow]warning:[/] broker_lite changed on disk during the run; the "
                      "broker processes started meanwhile may run other code")
    return {
        "benchmark": "broker",
        "generated_at": utc_now(),
        "code": code,
        "machine": machine,
        "load_average": {"start": load_before, "end": load_average()},
        "parameters": {
            "messages": args.messages, "repeat": args.repeat, "body_size": BODY_SIZE,
            "queues": QUEUES, "batch": BATCH, "batch_window": BATCH_WINDOW,
            "single_window": SINGLE_WINDOW, "pull_sizes": list(PULL_SIZES),
            "count_share": COUNT_SHARE, "redis_version": redis_version(),
            "redis_py_version": redis.__version__, "redis_py_parser": redis_py_parser(),
            "redis_appendfsync": REDIS_FSYNC,
            "data_dir": "bench/results/tmp (removed afterwards)",
        },
        "cases": results,
        "targets": targets,
        "profiles": profiles,
    }


def main(argv: Sequence[str] | None = None) -> int:
    return benchmark_main(__file__, "broker", list(sys.argv[1:] if argv is None else argv),
                          parse_args, measure, markdown_section)


if __name__ == "__main__":
    sys.exit(main())
