"""Storage benchmark: MessageStore appends and crash recovery vs the physical bound.

Usage::

    .venv/bin/python bench/storage.py [--records N] [--repeat K] [--quick]
                                      [--recovery-mb MB] [--cases a,b] [--profile]
                                      [--at-commit REV] [--render]

Every case runs our code ("ours") and the plain-syscall bound on the same disk
("bound") side by side, ``--repeat`` times, interleaved (the order flips each
repetition). It reports medians and the median of the paired ratios
ours / bound (1.0 = we reach what the disk and kernel allow; higher is better).

Cases (records are 1 KiB bodies, one encoded record is ~1.2 KB):

* ``async-N``: N threads call ``MessageStore.put`` with ``flush="async"``.
  Bound: one thread ``os.write``-ing the same encoded record bytes, one call per
  record, to a plain file.
* ``sync-N``: the same with ``flush="sync"`` (``put`` returns after the group
  commit ``fdatasync``). Bound: one thread writing batches of N records
  (one ``os.write`` each) and calling ``fdatasync`` after each batch -- the best
  group commit can do with N appenders, each having one record in flight.
* ``sync-asyncio-N`` (N = 8, 64): N asyncio tasks on one event loop, each
  with one record in flight, acknowledged the way the server does it:
  ``put_nowait`` and a wait in the server's ``FlushGate``. Same bound as ``sync-N``.
* ``recovery-*``: reopen a log of ``--recovery-mb`` MB after a simulated crash
  (checkpoint removed, ``abort`` present), so every record is validated (CRC
  and length) from the start. Bound: sequential ``readinto`` of the same bytes
  plus ``zlib.crc32`` over them. ``warm`` runs from the page cache (a process
  crash), ``cold`` evicts the files first with ``posix_fadvise(DONTNEED)`` (a
  machine restart). ``recovery-scan-warm`` times ``CommitLog.recover`` alone.

Full runs write ``bench/results/storage.json`` and the generated part of
``bench/README.md``; ``--quick`` and ``--cases`` runs only print. With
``--at-commit REV`` the script measures ``broker_lite`` as committed at REV
(extracted with ``git archive``, run in a child process) instead of the
working tree.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import inspect
import io
import os
import pstats
import shutil
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from _common import (
    COMMIT_ENV,
    MB,
    SRC_ENV,
    Samples,
    benchmark_main,
    code_state,
    describe_machine,
    load_average,
    machine_summary,
    scratch_dir,
    settle,
    source_digest,
    utc_now,
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
from storage_versus import VersusWorker, serve

try:
    from broker_lite.serving.flushgate import FlushGate
except ImportError:  # --versus REV from before serving/ existed (49302c8): the server's own gate
    from broker_lite.server.flushgate import FlushGate  # type: ignore[no-redef]
from broker_lite.storage import CommitLog, MessageStore, MessageToStore, StoreConfig

BODY_SIZE = 1024
TOPIC = "BenchTopic"
QUEUES = 4
SEGMENT_SIZE = 64 * 2**20
APPENDERS = (1, 8, 64)
#: with one appender the asyncio path is the thread path plus a loop hop; not repeated
ASYNCIO_APPENDERS = (8, 64)
#: sync runs are slower; their record counts are --records divided by these
SYNC_DIVISORS = {1: 20, 8: 5, 64: 3}
READ_CHUNK = 2**20
#: file names MessageStore keeps in its data directory (see broker_lite/storage/store.py)
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
TARGETS = {
    "async-1": ("records_per_s", 150_000.0, "async put, 1 appender, records/s"),
    "sync-64": ("records_per_s", 30_000.0, "sync put, 64 appender threads, records/s"),
    "sync-asyncio-64": ("records_per_s", 30_000.0,
                        "sync, 64 asyncio appenders (FlushGate), records/s"),
    "recovery-warm": ("mb_per_s", 300.0, "crash recovery with CRC checks, MB/s"),
}

FlushMode = Literal["async", "sync"]
#: wide enough for the results table when output is not a terminal
console = Console(width=None if sys.stdout.isatty() else 120)
_BODY = b"x" * BODY_SIZE


# -- workload ------------------------------------------------------------------------


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


# -- code under test -------------------------------------------------------------------


def storage_dir() -> Path:
    """The broker_lite/storage directory actually imported.

    Found from a module file: an editable install may make ``broker_lite``
    itself a namespace package, which has no ``__file__``.
    """
    return Path(inspect.getfile(MessageStore)).resolve().parent


# -- measurements --------------------------------------------------------------------


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


# -- appends: ours -------------------------------------------------------------------


def run_appenders(store: MessageStore, batches: Sequence[Sequence[MessageToStore]]) -> float:
    """Start one thread per batch, release them together, return the wall time."""
    gate = threading.Barrier(len(batches) + 1)
    errors: list[BaseException] = []

    def appender(messages: Sequence[MessageToStore]) -> None:
        put = store.put
        gate.wait()
        try:
            for msg in messages:
                put(msg)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    gate.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed


def store_append_run(
    root: Path, mode: FlushMode, messages: Sequence[MessageToStore], appenders: int
) -> Measurement:
    """Append ``messages`` with ``appenders`` threads into a fresh store; time the puts only."""
    data_dir = root / f"store-{mode}-{appenders}"
    shutil.rmtree(data_dir, ignore_errors=True)
    batches = [messages[i::appenders] for i in range(appenders)]
    settle()
    store = MessageStore(StoreConfig(data_dir=data_dir, flush=mode, segment_size=SEGMENT_SIZE))
    try:
        seconds = run_appenders(store, batches)
        fsyncs = _fsync_count(store)
        if store.max_offset - store.min_offset <= 0:
            raise RuntimeError("nothing was appended")
    finally:
        store.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    extra = {} if fsyncs is None else {"fdatasyncs": float(fsyncs)}
    return Measurement(seconds, extra)


def store_asyncio_run(
    root: Path, messages: Sequence[MessageToStore], appenders: int
) -> Measurement:
    """Sync flush the way the asyncio server acknowledges: ``put_nowait``, then wait in
    the server's ``FlushGate``, which the flusher settles once per fsync.

    ``appenders`` asyncio tasks on one event loop, each with one record in flight.
    """
    data_dir = root / f"store-asyncio-{appenders}"
    shutil.rmtree(data_dir, ignore_errors=True)
    batches = [messages[i::appenders] for i in range(appenders)]
    settle()
    store = MessageStore(StoreConfig(data_dir=data_dir, flush="sync", segment_size=SEGMENT_SIZE))
    try:
        seconds = asyncio.run(_asyncio_appenders(store, batches))
        fsyncs = _fsync_count(store)
    finally:
        store.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    return Measurement(seconds, {} if fsyncs is None else {"fdatasyncs": float(fsyncs)})


async def _asyncio_appenders(
    store: MessageStore, batches: Sequence[Sequence[MessageToStore]]
) -> float:
    """Appender tasks wait in the server's :class:`FlushGate` (one loop hop per fsync)."""
    gate = FlushGate(store, asyncio.get_running_loop())

    async def appender(messages: Sequence[MessageToStore]) -> None:
        for msg in messages:
            error = await gate.wait(store.put_nowait(msg).end_offset)
            if error is not None:
                raise error

    started = time.perf_counter()
    await asyncio.gather(*(appender(b) for b in batches))
    return time.perf_counter() - started


def _fsync_count(store: MessageStore) -> int | None:
    """How many log flushes the flusher thread ran (a private counter; None if gone)."""
    flusher = getattr(store, "_flusher", None)
    count = getattr(flusher, "fsync_count", None)
    return count if isinstance(count, int) else None


# -- appends: bound ------------------------------------------------------------------


def write_bound_run(root: Path, record: bytes, count: int, batch: int | None) -> Measurement:
    """``os.write`` ``record`` ``count`` times to a new file; ``fdatasync`` every ``batch``.

    ``batch=None`` never syncs (the async bound). Times the writes and syncs,
    not opening or removing the file.
    """
    path = root / "bound.dat"
    path.unlink(missing_ok=True)
    settle()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        seconds = timed(lambda: _write_loop(fd, record, count, batch))
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    syncs = 0 if batch is None else -(-count // batch)
    return Measurement(seconds, {"fdatasyncs": float(syncs)})


def _write_loop(fd: int, record: bytes, count: int, batch: int | None) -> None:
    write, fdatasync = os.write, os.fdatasync
    if batch is None:
        for _ in range(count):
            write(fd, record)
        return
    done = 0
    while done < count:
        n = min(batch, count - done)
        for _ in range(n):
            write(fd, record)
        fdatasync(fd)
        done += n


def append_comparisons(
    root: Path, records: int, messages: Sequence[MessageToStore], record: bytes
) -> list[Comparison]:
    """async-N and sync-N (threads) for N in 1, 8, 64; sync-asyncio-N for 8 and 64."""
    cases: list[Comparison] = []
    for mode in ("async", "sync", "sync-asyncio"):
        for n in ASYNCIO_APPENDERS if mode == "sync-asyncio" else APPENDERS:
            count = records if mode == "async" else records // SYNC_DIVISORS[n]
            count = max(n, count - count % n)
            msgs = messages[:count]
            batch = None if mode == "async" else n
            if mode == "sync-asyncio":
                ours = Side(f"{n} asyncio task(s): put_nowait + FlushGate, flush=sync",
                            _bind(store_asyncio_run, root, msgs, n))
            else:
                ours = Side(f"{n} thread(s) calling MessageStore.put, flush={mode}",
                            _bind(store_append_run, root, mode, msgs, n))
            bound_what = ("os.write per record, no fsync" if batch is None
                          else f"os.write per record + fdatasync every {n} records")
            cases.append(Comparison(
                name=f"{mode}-{n}", kind="append", records=count, nbytes=count * len(record),
                ours=ours,
                bound=Side(bound_what, _bind(write_bound_run, root, record, count, batch)),
                params={"mode": mode, "appenders": n},
            ))
    return cases


def _bind(fn: Callable[..., Measurement], *args: Any) -> Callable[[], Measurement]:
    return lambda: fn(*args)


# -- recovery ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecoveryLog:
    """The log built once for the recovery cases."""

    data_dir: Path
    records: int
    log_bytes: int
    log_end: int
    segments: list[Path]


def recovery_config(data_dir: Path) -> StoreConfig:
    return StoreConfig(data_dir=data_dir, flush="async", segment_size=SEGMENT_SIZE)


def build_recovery_log(root: Path, target_mb: float) -> RecoveryLog:
    """Append benchmark messages until the log holds ``target_mb`` MB, then close."""
    data_dir = root / "recovery"
    shutil.rmtree(data_dir, ignore_errors=True)
    target = int(target_mb * MB)
    records = 0
    with MessageStore(recovery_config(data_dir)) as store:
        while store.max_offset - store.min_offset < target:
            store.put(make_message(records))
            records += 1
        start, end = store.min_offset, store.max_offset
    segments = sorted(p for p in (data_dir / "commitlog").iterdir() if p.name.isdigit())
    return RecoveryLog(data_dir, records, end - start, end, segments)


def simulate_crash(data_dir: Path) -> None:
    """Make the next open validate the whole log: no checkpoint, an abort marker."""
    (data_dir / CHECKPOINT_FILE).unlink(missing_ok=True)
    (data_dir / ABORT_FILE).write_bytes(b"0")


def evict(paths: Iterator[Path]) -> None:
    """Drop these files' (clean) pages from the page cache."""
    for path in paths:
        if not path.is_file():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def prepare_recovery(log: RecoveryLog, cold: bool) -> None:
    simulate_crash(log.data_dir)
    settle()
    if cold:
        evict(log.data_dir.rglob("*"))


def store_recovery_run(log: RecoveryLog, cold: bool) -> Measurement:
    """Time ``MessageStore(cfg)`` after a simulated crash; check what it recovered."""
    prepare_recovery(log, cold)
    started = time.perf_counter()
    store = MessageStore(recovery_config(log.data_dir))
    opened = time.perf_counter() - started
    try:
        report = store.recovery
        full_scan = report.crashed and report.checkpoint is None
        if not full_scan or report.corruption is not None or report.log_end != log.log_end:
            raise RuntimeError(f"unexpected recovery: {report}")
    finally:
        store.close()
    return Measurement(report.seconds, {"open_seconds": opened,
                                        "redispatched": float(report.redispatched)})


def scan_recovery_run(log: RecoveryLog) -> Measurement:
    """Time ``CommitLog.recover`` alone: the CRC and length walk over the log."""
    prepare_recovery(log, cold=False)
    commitlog = CommitLog(log.data_dir / "commitlog", SEGMENT_SIZE)
    try:
        started = time.perf_counter()
        end, corruption = commitlog.recover(commitlog.min_offset)
        seconds = time.perf_counter() - started
    finally:
        commitlog.close()
    if end != log.log_end or corruption is not None:
        raise RuntimeError(f"unexpected scan result: end {end}, {corruption}")
    return Measurement(seconds)


def read_crc_run(log: RecoveryLog, cold: bool) -> Measurement:
    """The bound: read the log's bytes sequentially and CRC32 all of them."""
    prepare_recovery(log, cold)
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    crc = 0
    started = time.perf_counter()
    left = log.log_bytes
    for path in log.segments:
        with open(path, "rb", buffering=0) as fh:
            while left > 0:
                n = fh.readinto(view[: min(READ_CHUNK, left)])
                if not n:
                    break
                crc = zlib.crc32(view[:n], crc)
                left -= n
    seconds = time.perf_counter() - started
    if left:
        raise RuntimeError(f"{left} bytes of the log were not read")
    return Measurement(seconds, {"crc": float(crc)})


def recovery_comparisons(log: RecoveryLog) -> list[Comparison]:
    """recovery-warm, recovery-scan-warm and recovery-cold."""
    bound_what = "sequential readinto (1 MiB) + zlib.crc32 of the same bytes"

    def make(name: str, what: str, ours: Callable[[], Measurement], cold: bool) -> Comparison:
        return Comparison(
            name=name, kind="recovery", records=log.records, nbytes=log.log_bytes,
            ours=Side(what, ours), bound=Side(bound_what, lambda: read_crc_run(log, cold)),
            params={"page_cache": "cold" if cold else "warm"},
        )

    return [
        make("recovery-warm", "MessageStore open after a crash (RecoveryReport.seconds)",
             lambda: store_recovery_run(log, cold=False), cold=False),
        make("recovery-scan-warm", "CommitLog.recover alone (CRC + length walk)",
             lambda: scan_recovery_run(log), cold=False),
        make("recovery-cold", "MessageStore open after a crash, files evicted first",
             lambda: store_recovery_run(log, cold=True), cold=True),
    ]


# -- running -------------------------------------------------------------------------


def run_all(cases: Sequence[Comparison], repeat: int, progress: Progress) -> None:
    """``repeat`` rounds over every case, its sides back to back, the order rotated."""
    task = progress.add_task("measuring", total=repeat * sum(len(c.sides()) for c in cases))
    for rep in range(repeat):
        for case in cases:
            sides = case.sides()
            sides = sides[rep % len(sides):] + sides[: rep % len(sides)]  # rotate the order
            for side in sides:
                label = "ours" if side is case.ours else "bound" if side is case.bound \
                    else "versus"
                progress.update(task, description=f"[{rep + 1}/{repeat}] {case.name} {label}")
                side.samples.append(side.run())
                progress.advance(task)


# -- profiling -----------------------------------------------------------------------


def profile(label: str, fn: Callable[[], object], top: int = 18) -> None:
    """Run ``fn`` under cProfile and print the functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    console.rule(f"profile: {label} (total {total:.2f} s under cProfile)")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in rows[:top]:
        where = f"{Path(file).name}:{line}" if line else file
        console.print(f"{100 * tottime / total:5.1f}%  own {tottime:6.3f}s  cum {cumtime:6.3f}s  "
                      f"{calls:>9}  {func}  ({where})", highlight=False)


def run_profiles(root: Path, log: RecoveryLog, messages: Sequence[MessageToStore]) -> None:
    """Profile the single-appender async put loop and the crash-recovery open.

    Only the loop and the open are profiled; opening and closing around them
    are not. cProfile sees the calling thread only, so both run in this one.
    """
    data_dir = root / "profile"
    store = MessageStore(StoreConfig(data_dir=data_dir, flush="async", segment_size=SEGMENT_SIZE))

    def puts() -> None:
        put = store.put
        for msg in messages:
            put(msg)

    try:
        profile(f"async put, 1 appender, {len(messages):,} records", puts)
    finally:
        store.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    prepare_recovery(log, cold=False)
    opened: list[MessageStore] = []
    profile(f"crash recovery of {log.log_bytes / MB:.0f} MB",
            lambda: opened.append(MessageStore(recovery_config(log.data_dir))))
    for store in opened:
        store.close()


# -- reporting -----------------------------------------------------------------------


def case_result(case: Comparison) -> dict[str, Any]:
    """A case as JSON: what was compared, medians, rates, ratio, every sample."""

    def side(s: Side) -> dict[str, Any]:
        secs = s.seconds()
        extras = sorted({k for m in s.samples for k in m.extra})
        return {
            "what": s.what,
            "median_seconds": secs.median,
            "records_per_s": case.rate(s, "records"),
            "mb_per_s": case.rate(s, "mb"),
            "spread": secs.spread,
            "samples_seconds": secs.values,
            **{f"samples_{k}": [m.extra.get(k) for m in s.samples] for k in extras},
        }

    ratios = case.ratios()
    result = {
        "name": case.name,
        "kind": case.kind,
        **case.params,
        "records": case.records,
        "bytes": case.nbytes,
        "ours": side(case.ours),
        "bound": side(case.bound),
        "ratio_meaning": "ours throughput / bound throughput, median over paired repetitions",
        "ratio_median": ratios.median,
        "ratio_samples": ratios.values,
    }
    if case.versus is not None:
        vs_bound, ours_vs = case.ratios(case.versus), case.ratios(case.ours, case.versus)
        result |= {
            "versus": side(case.versus),
            "versus_ratio_median": vs_bound.median,
            "versus_ratio_samples": vs_bound.values,
            "ours_vs_versus_meaning": "ours throughput / versus throughput, paired",
            "ours_vs_versus_median": ours_vs.median,
            "ours_vs_versus_samples": ours_vs.values,
        }
    return result


def target_results(cases: Sequence[Comparison]) -> list[dict[str, Any]]:
    by_name = {c.name: c for c in cases}
    results: list[dict[str, Any]] = []
    for name, (metric, goal, text) in TARGETS.items():
        case = by_name.get(name)
        if case is None:
            continue
        value = case.rate(case.ours, "records" if metric == "records_per_s" else "mb")
        results.append({"case": name, "description": text, "metric": metric,
                        "target": goal, "measured": value, "met": value >= goal})
    return results


def results_table(cases: Sequence[Comparison], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    versus = any(c.versus for c in cases)
    cols = ["case", "records", "ours rec/s", "ours MB/s", "bound rec/s", "bound MB/s",
            "ours/bound", "ratio range"]
    if versus:
        cols += ["vs rec/s", "vs/bound", "ours/vs", "ours/vs range"]
    for col in cols:
        table.add_column(col, justify="left" if col == "case" else "right")
    for case in cases:
        ratios = case.ratios()
        row = [
            case.name, f"{case.records:,}",
            f"{case.rate(case.ours, 'records'):,.0f}", f"{case.rate(case.ours, 'mb'):,.1f}",
            f"{case.rate(case.bound, 'records'):,.0f}", f"{case.rate(case.bound, 'mb'):,.1f}",
            f"{ratios.median:.2f}", f"{min(ratios.values):.2f}-{max(ratios.values):.2f}",
        ]
        if case.versus is not None:
            ours_vs = case.ratios(case.ours, case.versus)
            row += [f"{case.rate(case.versus, 'records'):,.0f}",
                    f"{case.ratios(case.versus).median:.2f}", f"{ours_vs.median:.3f}",
                    f"{min(ours_vs.values):.2f}-{max(ours_vs.values):.2f}"]
        elif versus:
            row += ["", "", "", ""]
        table.add_row(*row)
    return table


def targets_table(targets: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="targets", title_justify="left")
    for col in ("target", "goal", "measured", "met"):
        table.add_column(col, justify="left" if col == "target" else "right")
    for t in targets:
        table.add_row(t["description"], f"{t['target']:,.0f}", f"{t['measured']:,.0f}",
                      "[green]yes[/]" if t["met"] else "[red]no[/]")
    return table


def code_summary(code: dict[str, Any]) -> str:
    """``commit abc123 (extracted)`` or ``working tree at abc123, with uncommitted ...``."""
    commit = (code.get("commit") or "?")[:12]
    if code["source"] == "commit":
        return f"broker_lite as committed at `{commit}` (--at-commit)"
    dirty = [p for p in code.get("dirty_paths", []) if p.startswith("broker_lite/storage")]
    text = f"working tree at `{commit}`"
    if dirty:
        text += f", with uncommitted changes to {', '.join(dirty)}"
    if code.get("changed_during_run"):
        text += " (changed during the run)"
    return text


def markdown_section(result: dict[str, Any]) -> str:
    """The generated part of bench/README.md: machine, parameters, results, targets."""
    params = result["parameters"]
    versus = result.get("versus")
    lines = [
        f"Last full run: {result['generated_at']}, {params['repeat']} repetitions (medians).",
        f"Code measured: {code_summary(result['code'])}"
        + (f"; versus: broker_lite as committed at `{versus['commit'][:12]}` (--versus), "
           "run in a child process between ours and the bound, every repetition"
           if versus else "") + ".",
        f"Machine: {machine_summary(result['machine'])}; data dir on the repository's disk; "
        f"load average {_load_text(result['load_average'])}.",
        f"Record: {params['body_size']} B body, {params['record_size']} B encoded; "
        f"segments of {params['segment_size'] // 2**20} MiB. MB = 10^6 bytes.",
        "",
        "| case | records | ours rec/s | ours MB/s | bound rec/s | bound MB/s | ours/bound "
        "| ratio range |" + (" versus rec/s | versus/bound | ours/versus | range |"
                             if versus else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if versus else ""),
    ]
    for c in result["cases"]:
        row = (
            f"| {c['name']} | {c['records']:,} | {c['ours']['records_per_s']:,.0f} | "
            f"{c['ours']['mb_per_s']:,.1f} | {c['bound']['records_per_s']:,.0f} | "
            f"{c['bound']['mb_per_s']:,.1f} | {c['ratio_median']:.2f} | "
            f"{min(c['ratio_samples']):.2f}-{max(c['ratio_samples']):.2f} |"
        )
        if "versus" in c:
            row += (f" {c['versus']['records_per_s']:,.0f} | {c['versus_ratio_median']:.2f} | "
                    f"{c['ours_vs_versus_median']:.3f} | {min(c['ours_vs_versus_samples']):.2f}-"
                    f"{max(c['ours_vs_versus_samples']):.2f} |")
        elif versus:
            row += " | | | |"
        lines.append(row)
    lines += ["", "| target | goal | measured | met |", "|---|---:|---:|:---:|"]
    for t in result["targets"]:
        lines.append(f"| {t['description']} | {t['target']:,.0f} | {t['measured']:,.0f} | "
                     f"{'yes' if t['met'] else '**no**'} |")
    sync = [c for c in result["cases"] if str(c.get("mode", "")).startswith("sync")]
    if sync:
        lines += ["", "Records per `fdatasync` achieved by group commit (median; the bound "
                  "does N): " + ", ".join(f"{c['name']}: {_per_sync(c):.1f}" for c in sync) + "."]
    return "\n".join(lines)


def _load_text(load: dict[str, list[float]]) -> str:
    start, end = load.get("start"), load.get("end")
    return (f"{start[0] if start else '?'} at start, {end[0] if end else '?'} at end "
            "(1 min, the benchmark included)")


def _per_sync(case: dict[str, Any]) -> float:
    syncs = [s for s in case["ours"].get("samples_fdatasyncs", []) if s]
    return case["records"] / sorted(syncs)[len(syncs) // 2] if syncs else float("nan")


# -- main ----------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=200_000,
                        help="records per async run (sync runs: N/20, N/5, N/3 for 1/8/64 "
                             "appenders); default 200000")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--recovery-mb", type=float, default=256.0,
                        help="size of the log recovered (default 256 MB)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 20000 records, 3 repetitions, 32 MB log; no files written")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names to run (no files written)")
    parser.add_argument("--at-commit", metavar="REV", default="",
                        help="measure broker_lite as committed at REV (e.g. HEAD), not the "
                             "working tree")
    parser.add_argument("--versus", metavar="REV", default="",
                        help="also run every case with broker_lite as committed at REV (in a "
                             "child process, interleaved with ours and the bound) and report "
                             "ours/REV")
    parser.add_argument("--versus-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the README section from bench/results/storage.json")
    parser.add_argument("--profile", action="store_true",
                        help="also profile async-1 and recovery with cProfile")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.repeat, args.recovery_mb = 20_000, 3, 32.0
    return args


def select(cases: list[Comparison], names: str) -> list[Comparison]:
    if not names:
        return cases
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {c.name for c in cases}
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}")
    return [c for c in cases if c.name in wanted]


def _code_state() -> dict[str, Any]:
    """Which broker_lite is measured, with a digest of its storage package."""
    return code_state(storage_dir(), {"storage_digest": source_digest(storage_dir())})


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every selected case; return the result document."""
    code = _code_state()
    load_before = load_average()
    if load_before and load_before[0] > 0.5 * (os.cpu_count() or 1):
        console.print(f"[yellow]warning:[/] load average {load_before[0]} at start: other work "
                      "on this machine will add noise", highlight=False)
    with scratch_dir("storage") as root:
        machine = describe_machine(root)
        console.print(f"[bold]storage benchmark[/] on {machine_summary(machine)}", highlight=False)
        console.print(f"code: {code_summary(code)}; data dir {root}", highlight=False)
        record = encoded_record(root)
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        with progress:
            setup = progress.add_task("building messages and the recovery log", total=None)
            messages = [make_message(i) for i in range(args.records)]
            log = build_recovery_log(root, args.recovery_mb)
            progress.remove_task(setup)
            cases = select(append_comparisons(root, args.records, messages, record)
                           + recovery_comparisons(log), args.cases)
            worker = start_versus(args, cases) if args.versus else None
            try:
                run_all(cases, args.repeat, progress)
            finally:
                if worker is not None:
                    worker.close()
        console.print(results_table(cases, f"median of {args.repeat} runs; ratio = median of "
                                           "paired ours/bound throughput"))
        targets = target_results(cases)
        if targets:
            console.print(targets_table(targets))
        if args.profile:
            run_profiles(root, log, messages[: min(len(messages), 100_000)])
    code["changed_during_run"] = source_digest(storage_dir()) != code["storage_digest"]
    if code["changed_during_run"]:
        console.print("[yellow]warning:[/] broker_lite/storage changed on disk during the run; "
                      "the code imported at the start was measured")
    return {
        "benchmark": "storage",
        "generated_at": utc_now(),
        "code": code,
        "machine": machine,
        "load_average": {"start": load_before, "end": load_average()},
        "parameters": {
            "records_async": args.records, "repeat": args.repeat,
            "recovery_mb": args.recovery_mb, "recovery_records": log.records,
            "body_size": BODY_SIZE, "record_size": len(record), "segment_size": SEGMENT_SIZE,
            "topic": TOPIC, "queues": QUEUES, "sync_divisors": SYNC_DIVISORS,
            "data_dir": "bench/results/tmp (removed afterwards)",
        },
        "versus": None if worker is None else {"commit": worker.commit, **worker.info},
        "cases": [case_result(c) for c in cases],
        "targets": targets,
    }


def start_versus(args: argparse.Namespace, cases: Sequence[Comparison]) -> VersusWorker:
    """Start the ``--versus`` child and give every case a side run by it."""
    worker = VersusWorker(args.versus, Path(__file__), [
        "--records", str(args.records), "--recovery-mb", str(args.recovery_mb),
        "--cases", ",".join(c.name for c in cases)], SRC_ENV, COMMIT_ENV)
    console.print(f"versus: broker_lite at commit {worker.commit[:12]} in a child process; "
                  f"its record is {worker.info['record_size']} B", highlight=False)

    def run_in_child(name: str) -> Measurement:
        return Measurement(*worker.run(name))

    for case in cases:
        case.versus = Side(f"broker_lite at {worker.commit[:12]}: {case.ours.what}",
                           lambda name=case.name: run_in_child(name))
    return worker


def versus_worker(args: argparse.Namespace) -> int:
    """The ``--versus`` child: build its own workload with the code it imported, then serve."""
    code = _code_state()
    with scratch_dir("storage-versus") as root:
        record = encoded_record(root)
        messages = [make_message(i) for i in range(args.records)]
        log = build_recovery_log(root, args.recovery_mb)
        cases = select(append_comparisons(root, args.records, messages, record)
                       + recovery_comparisons(log), args.cases)
        serve({"code": code, "record_size": len(record), "recovery_records": log.records,
               "recovery_bytes": log.log_bytes}, {c.name: c.ours.run for c in cases}, sys.stdout)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.versus_worker:
        return versus_worker(args)
    return benchmark_main(__file__, "storage", argv, parse_args, measure, markdown_section)


if __name__ == "__main__":
    sys.exit(main())
