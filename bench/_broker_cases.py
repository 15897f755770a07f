"""bench/broker.py's cases: the constants, what each case does, and the samples it keeps.

The load's shape (bodies, queues, batch sizes, windows, the share of
``--messages`` each case runs), the goals, :class:`CaseSpec` (one case),
:class:`Workload` (one side of a case; only ``load`` is timed),
:class:`Side` and :class:`Comparison` (the samples of ours and Redis), and
:func:`build_cases`, which lists every case for a ``--messages`` count.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from _common import Samples
from rich.console import Console

__all__ = [
    "BATCH",
    "BATCH_WINDOW",
    "BODY",
    "BODY_SIZE",
    "COUNT_SHARE",
    "FIELDS",
    "GROUP",
    "PULL_SIZES",
    "QUEUES",
    "READY_TIMEOUT",
    "REDIS_FSYNC",
    "REQUEST_TIMEOUT",
    "SINGLE_WINDOW",
    "STOP_TIMEOUT",
    "TARGETS",
    "CaseSpec",
    "Comparison",
    "FlushMode",
    "Kind",
    "Measurement",
    "Side",
    "Workload",
    "build_cases",
    "chunk",
    "console",
    "requests_for",
]

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


FlushMode = Literal["async", "sync"]
Kind = Literal["send", "tx", "consume"]
REDIS_FSYNC: dict[FlushMode, str] = {"async": "everysec", "sync": "always"}
console = Console(width=None if sys.stdout.isatty() else 160)
BODY = b"x" * BODY_SIZE
#: the one field of every stream entry (typed loosely: redis-py's field types are narrow)
FIELDS: dict[Any, Any] = {b"body": BODY}


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
