"""bench/storage.py's recovery cases: reopening a log after a simulated crash.

:func:`build_recovery_log` writes the log once; every run removes the
checkpoint and leaves the ``abort`` marker (:func:`simulate_crash`), so the
whole log is validated, from the page cache or after evicting it
(:func:`evict`). Ours: the store's open (:func:`store_recovery_run`) or
``CommitLog.recover`` alone; the bound: read and CRC the same bytes
(:func:`read_crc_run`).
"""

from __future__ import annotations

import os
import shutil
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import MB, settle
from _storage_cases import SEGMENT_SIZE, Comparison, Measurement, Side, make_message

from broker_lite.storage import CommitLog, MessageStore, StoreConfig

__all__ = [
    "ABORT_FILE",
    "CHECKPOINT_FILE",
    "READ_CHUNK",
    "RecoveryLog",
    "build_recovery_log",
    "evict",
    "prepare_recovery",
    "read_crc_run",
    "recovery_comparisons",
    "recovery_config",
    "scan_recovery_run",
    "simulate_crash",
    "store_recovery_run",
]

READ_CHUNK = 2**20
#: file names MessageStore keeps in its data directory (see broker_lite/storage/store.py)
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"


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
