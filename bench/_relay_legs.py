"""bench/relay.py's leg breakdown of our commit-to-visible, and the SQL-only bound.

Legs, per row of a latency run (ours only), each from the row's own records:

* ``commit -> enqueued``: the producer's ``after_commit`` stamp to Celery's
  ``after_task_publish`` signal for the task holding the row's id (the
  on_commit hook's ``enqueue_window`` and the Redis push);
* ``enqueued -> picked up``: to the worker's ``task_prerun`` signal for that
  task (Redis, the worker's consumer, the pool hand-off);
* ``picked up -> claimed``: to the relay pass handing the claimed rows to its
  publisher (the claim transaction);
* ``claimed -> halves stored``, ``halves -> ends stored``: the publisher's two
  calls (broker_lite's two requests);
* ``ends stored -> visible``: to the consumer's receipt (broker_lite's
  long-poll wake-up and the pull).

Rows relayed by the wake-up listener (:mod:`outbox.celery.listen`) have no
task on their path: their first leg is ``commit -> claimed`` (the NOTIFY, the
listener's wake-up and the claim). That leg is split by what the row's relay
thread was doing at the commit:

* ``idle lane: commit -> claimed``: its previous pass had ended (the NOTIFY,
  the wake-up and the claim only);
* ``busy lane: commit -> pass ended``: a pass was in flight (the wait for it
  to end: its broker calls), then ``busy lane: pass ended -> claimed`` (the
  pass's record, any empty pass, the next claim).

A pass is the rows one thread handed to the publisher at one time; its end
is the last of its ``ends`` records.

How it is recorded without touching the hot path of the product: the worker
is built with a bench-only ``publisher_factory`` (the seam ``run_worker``
takes) whose publisher wraps the real one and appends one line per call to a
file (``claimed``/``halves``/``ends``, the time, the thread's name and the
ids), and Celery's own signals (``task_prerun`` in the worker,
``after_task_publish`` in the producer) append the task legs. All times are
``time.monotonic()``, one clock for every process on Linux.

The bound (:func:`sql_bound`): the fewest statements a relay must run per
batch, in a tight psycopg loop with no broker: claim ``batch_size`` due rows
with ``FOR UPDATE SKIP LOCKED`` (the product's own predicate and order,
returning the rows), then mark them relayed, each in its own transaction.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LEGS", "LEGS_ENV", "LegRecorder", "ObservedPublisher", "leg_summary",
           "read_records", "sql_bound", "watch_worker_tasks"]

#: the worker and producer children append their records to this file (when set)
LEGS_ENV = "ROCKETBOX_BENCH_LEGS"
#: the legs, in path order (the listener's rows: ``commit->claimed`` instead of the first 3)
LEGS = ("commit->enqueued", "enqueued->picked", "picked->claimed", "claimed->halves",
        "halves->ends", "ends->visible", "commit->claimed (listener)",
        "idle lane: commit->claimed", "busy lane: commit->pass ended",
        "busy lane: pass ended->claimed")


class LegRecorder:
    """Appends ``[kind, monotonic time, thread name, ids]`` lines to a file (thread-safe).

    The file stays open (line-buffered, one per process): opening and closing
    it for every line cost about 13 µs a line here (2 µs open, with the ``fstat``
    that notices a removed file), three lines a pass.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._out: Any = None
        self._pid = 0

    def record(self, kind: str, ids: Iterable[str], at: float | None = None) -> None:
        at = time.monotonic() if at is None else at
        with self._lock:
            # a forked child opens its own; so does a worker whose file the harness
            # removed between two runs (it lives on through them). Lines are written
            # only while the file exists: the harness creates it for a latency run and
            # removes it after, so throughput runs do not pay for the legs (5-7% of the
            # relay worker's time when they did)
            if (self._out is None or self._pid != os.getpid()
                    or os.fstat(self._out.fileno()).st_nlink == 0):
                if self._out is not None:
                    self._out.close()
                    self._out = None
                if not os.path.exists(self._path):
                    return
                self._out = open(self._path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
                self._pid = os.getpid()
            self._out.write(json.dumps([kind, at, threading.current_thread().name,
                                        list(ids)]) + "\n")


def recorder() -> LegRecorder | None:
    path = os.environ.get(LEGS_ENV)
    return LegRecorder(path) if path else None


class ObservedPublisher:
    """The real publisher, with the time of each call's start and end recorded."""

    def __init__(self, inner: Any, rec: LegRecorder) -> None:
        self._inner = inner
        self._rec = rec

    def send_halves(self, messages: Sequence[Any]) -> Any:
        ids = [m.tx_id for m in messages]
        self._rec.record("claimed", ids)
        out = self._inner.send_halves(messages)
        self._rec.record("halves", ids)
        return out

    def end_transactions(self, ends: Sequence[Any]) -> Any:
        out = self._inner.end_transactions(ends)
        self._rec.record("ends", [e.tx_id for e in ends])
        return out

    def send_and_end(self, messages: Sequence[Any], states: Sequence[Any]) -> Any:
        """The one round trip for halves and ends: both answered at once (``halves->ends``
        is 0 for its rows; ``claimed->halves`` is the round trip)."""
        ids = [m.tx_id for m in messages]
        self._rec.record("claimed", ids)
        out = self._inner.send_and_end(messages, states)
        if out is not None:
            at = time.monotonic()
            self._rec.record("halves", ids, at)
            self._rec.record("ends", ids, at)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def watch_worker_tasks(rec: LegRecorder) -> None:
    """Record ``picked`` when a pool thread starts a ``rocketbox.relay`` task."""
    from celery.signals import task_prerun

    from outbox.celery import RELAY_TASK

    def picked(sender: Any = None, args: Any = None, **_kw: Any) -> None:
        if getattr(sender, "name", "") == RELAY_TASK and args and args[0]:
            rec.record("picked", args[0])

    task_prerun.connect(picked, weak=False)


def watch_enqueues(rec: LegRecorder) -> None:
    """Record ``enqueued`` when the producer's hook has pushed a ``rocketbox.relay`` task."""
    from celery.signals import after_task_publish

    from outbox.celery import RELAY_TASK

    def enqueued(sender: Any = None, body: Any = None, **_kw: Any) -> None:
        if sender == RELAY_TASK and body and body[0] and body[0][0]:
            rec.record("enqueued", body[0][0])

    after_task_publish.connect(enqueued, weak=False)


def read_records(path: Path) -> dict[str, dict[str, tuple[float, str]]]:
    """``{kind: {tx_id: (first time, thread)}}`` from a records file."""
    out: dict[str, dict[str, tuple[float, str]]] = {}
    if not path.exists():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        kind, at, thread, ids = json.loads(line)
        seen = out.setdefault(kind, {})
        for tx in ids:
            if tx not in seen:
                seen[tx] = (float(at), str(thread))
    return out


def leg_summary(rows: Sequence[tuple[str, float, float]],
                records: dict[str, dict[str, tuple[float, str]]]) -> dict[str, Any]:
    """p50 (ms) and count of every leg over ``rows`` (``(tx_id, committed, visible)``)."""
    from _relay_common import percentile

    legs: dict[str, list[float]] = {name: [] for name in LEGS}
    via_listener = 0

    def at(kind: str, tx: str) -> float | None:
        hit = records.get(kind, {}).get(tx)
        return hit[0] if hit else None

    ended_before = _pass_ends(records)
    for tx, committed, visible in rows:
        claimed, halves, ends = at("claimed", tx), at("halves", tx), at("ends", tx)
        if claimed is None or halves is None or ends is None:
            continue
        if records["claimed"][tx][1].startswith("rocketbox-listener"):
            via_listener += 1
            legs["commit->claimed (listener)"].append(claimed - committed)
            previous = ended_before.get(records["claimed"][tx])
            if previous is None or previous <= committed:
                legs["idle lane: commit->claimed"].append(claimed - committed)
            else:
                legs["busy lane: commit->pass ended"].append(previous - committed)
                legs["busy lane: pass ended->claimed"].append(claimed - previous)
        else:
            enqueued, picked = at("enqueued", tx), at("picked", tx)
            if enqueued is not None:
                legs["commit->enqueued"].append(enqueued - committed)
            if enqueued is not None and picked is not None:
                legs["enqueued->picked"].append(picked - enqueued)
            if picked is not None and picked <= claimed:
                legs["picked->claimed"].append(claimed - picked)
        legs["claimed->halves"].append(halves - claimed)
        legs["halves->ends"].append(ends - halves)
        legs["ends->visible"].append(visible - ends)
    return {"p50_ms": {name: percentile([x * 1000 for x in v], 50) if v else None
                       for name, v in legs.items()},
            "p99_ms": {name: percentile([x * 1000 for x in v], 99) if v else None
                       for name, v in legs.items()},
            "samples": {name: len(v) for name, v in legs.items()},
            "rows": len(rows), "via_listener": via_listener}


def _pass_ends(records: dict[str, dict[str, tuple[float, str]]]
               ) -> dict[tuple[float, str], float]:
    """``{(claimed time, thread): end of the thread's previous pass}`` over every pass."""
    ends = records.get("ends", {})
    last: dict[tuple[float, str], float] = {}  # a pass's end: its last ``ends`` record
    for tx, key in records.get("claimed", {}).items():
        if tx in ends:
            last[key] = max(last.get(key, 0.0), ends[tx][0])
    out: dict[tuple[float, str], float] = {}
    by_thread: dict[str, list[float]] = {}
    for claimed, thread in last:
        by_thread.setdefault(thread, []).append(claimed)
    for thread, starts in by_thread.items():
        starts.sort()
        for before, after in itertools.pairwise(starts):
            out[(after, thread)] = last[(before, thread)]
    return out


def sql_bound(db: str, batch_size: int, rows: int) -> dict[str, Any]:
    """Rows/s of claim (``SKIP LOCKED``) + mark relayed, per batch, over ``rows`` due rows."""
    import psycopg

    libpq = db.replace("postgresql+psycopg://", "postgresql://")
    claim = ("UPDATE rocketbox_transaction SET claimed_by = 'bound', "
             "claimed_until = now() + interval '30 seconds' "
             "WHERE tx_id = ANY(ARRAY(SELECT tx_id FROM rocketbox_transaction "
             "WHERE relayed_at IS NULL AND NOT parked AND next_attempt_at <= now() "
             "AND (claimed_until IS NULL OR claimed_until < now()) "
             "ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED)) "
             "RETURNING tx_id, topic, tag, keys, message_group, body, headers, state")
    mark = ("UPDATE rocketbox_transaction SET relayed_at = now(), claimed_by = NULL, "
            "claimed_until = NULL WHERE tx_id = ANY(%s) AND claimed_by = 'bound'")
    from _relay_floors import cpu_of

    done = batches = 0
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute("SET enable_sort = off")  # as the product's claim does
        backend = conn.info.backend_pid  # its CPU, read before it exits with the connection
        cpu0, mine0 = cpu_of(backend), time.thread_time()
        t0 = time.monotonic()
        while True:
            got = [r[0] for r in conn.execute(claim, (batch_size,)).fetchall()]
            if not got:
                break
            conn.execute(mark, (got,))
            done += len(got)
            batches += 1
        seconds = time.monotonic() - t0
        cpu = {"postgres": cpu_of(backend) - cpu0, "harness": time.thread_time() - mine0}
    return {"rows": done, "batches": batches, "seconds": seconds,
            "per_s": done / seconds if seconds else 0.0, "batch_size": batch_size,
            "statements_per_batch": 2, "expected_rows": rows, "cpu_s": cpu}
