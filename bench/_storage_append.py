"""bench/storage.py's append cases: ``async-N``, ``sync-N`` and ``sync-asyncio-N``.

Ours: N threads calling ``MessageStore.put`` (:func:`store_append_run`), or
N asyncio tasks acknowledged through the server's ``FlushGate``
(:func:`store_asyncio_run`). The bound: ``os.write`` of the same encoded
record, one call per record, with one ``fdatasync`` per N records for the
sync cases (:func:`write_bound_run`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import settle
from _storage_cases import SEGMENT_SIZE, Comparison, FlushMode, Measurement, Side, timed

if TYPE_CHECKING:  # mypy checks against this tree, where the gate is in serving/
    from broker_lite.serving.flushgate import FlushGate
else:
    try:
        from broker_lite.serving.flushgate import FlushGate
    except ImportError:  # --versus REV from before serving/ existed (49302c8): the server's gate
        from broker_lite.server.flushgate import FlushGate
from broker_lite.storage import MessageStore, MessageToStore, StoreConfig

__all__ = [
    "APPENDERS",
    "ASYNCIO_APPENDERS",
    "SYNC_DIVISORS",
    "append_comparisons",
    "run_appenders",
    "store_append_run",
    "store_asyncio_run",
    "write_bound_run",
]

APPENDERS = (1, 8, 64)
#: with one appender the asyncio path is the thread path plus a loop hop; not repeated
ASYNCIO_APPENDERS = (8, 64)
#: sync runs are slower; their record counts are --records divided by these
SYNC_DIVISORS = {1: 20, 8: 5, 64: 3}


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
