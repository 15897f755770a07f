"""bench/storage.py's cases: the message, its encoded record, and the samples of a comparison.

The workload's constants (1 KiB bodies, topic, queues, segment size),
:func:`make_message` and :func:`encoded_record` (the bytes the bounds
write), which broker_lite/storage is measured (:func:`storage_dir`), and
the model every case fills: :class:`Measurement`, :class:`Side` (ours, the
bound or ``--versus``) and :class:`Comparison`.
"""

from __future__ import annotations

import inspect
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from _common import MB, Samples
from rich.console import Console

from broker_lite.storage import MessageStore, MessageToStore, StoreConfig

__all__ = [
    "BODY_SIZE",
    "QUEUES",
    "SEGMENT_SIZE",
    "TOPIC",
    "Comparison",
    "FlushMode",
    "Measurement",
    "Side",
    "console",
    "encoded_record",
    "make_message",
    "storage_dir",
    "timed",
]

BODY_SIZE = 1024
TOPIC = "BenchTopic"
QUEUES = 4
SEGMENT_SIZE = 64 * 2**20


FlushMode = Literal["async", "sync"]
#: wide enough for the results table when output is not a terminal
console = Console(width=None if sys.stdout.isatty() else 120)
_BODY = b"x" * BODY_SIZE


def make_message(i: int) -> MessageToStore:
    """The i-th benchmark message: 1 KiB body, a tag and a 32-character unique key."""
    return MessageToStore(
        topic=TOPIC,
        body=_BODY,
        queue_id=i % QUEUES,
        properties={"TAGS": "t", "UNIQ_KEY": f"B{i:031X}"},
    )


def encoded_record(root: Path) -> bytes:
    """The bytes the store writes for one benchmark message (for the bounds).

    Read back from a probe store, so that it is the measured code's format
    (also under ``--at-commit``).
    """
    with MessageStore(StoreConfig(data_dir=root / "probe", segment_size=SEGMENT_SIZE)) as store:
        put = store.put(make_message(0))
        record = store.get_raw(put.physical_offset, put.size)
    shutil.rmtree(root / "probe", ignore_errors=True)
    return record


def storage_dir() -> Path:
    """The broker_lite/storage directory actually imported.

    Found from a module file: an editable install may make ``broker_lite``
    itself a namespace package, which has no ``__file__``.
    """
    return Path(inspect.getfile(MessageStore)).resolve().parent


@dataclass(slots=True)
class Measurement:
    """One timed run: wall seconds plus anything else worth keeping."""

    seconds: float
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class Side:
    """One side of a comparison (ours or bound) and its samples."""

    what: str
    run: Callable[[], Measurement]
    samples: list[Measurement] = field(default_factory=list)

    def seconds(self) -> Samples:
        return Samples([m.seconds for m in self.samples])


@dataclass(slots=True)
class Comparison:
    """A case: ours and its bound, doing the same amount of work."""

    name: str
    kind: Literal["append", "recovery"]
    records: int
    nbytes: int
    ours: Side
    bound: Side
    params: dict[str, Any] = field(default_factory=dict)
    #: the same work done by broker_lite at another commit (``--versus``)
    versus: Side | None = None

    def ratios(self, side: Side | None = None, to: Side | None = None) -> Samples:
        """Paired throughput ratios ``side / to`` (default ours / bound), repetition by
        repetition (``to`` seconds / ``side`` seconds)."""
        num, den = side or self.ours, to or self.bound
        return Samples([b.seconds / o.seconds
                        for o, b in zip(num.samples, den.samples, strict=True)])

    def sides(self) -> list[Side]:
        return [self.ours, self.bound] + ([self.versus] if self.versus else [])

    def rate(self, side: Side, unit: Literal["records", "mb"]) -> float:
        amount = self.records if unit == "records" else self.nbytes / MB
        return amount / side.seconds().median


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started
