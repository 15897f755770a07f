"""The faults of a chaos run, and the seeded schedules that combine them.

A fault has a kind (:data:`KINDS`), a start and a length, in seconds from the
start of the load; :func:`apply` breaks something at the start and
:func:`clear` repairs it at the end (for a kill: starts the process again).
The window between them is the *outage*.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from _chaos_cluster import Cluster

__all__ = ["KINDS", "Fault", "HeldSnapshot", "apply", "clear", "combined_schedule", "single"]

#: every fault kind: what breaks
KINDS = {
    "relay_kill": "kill -9 the relay's process group (worker, beat)",
    "broker_kill": "kill -9 broker_lite",
    "checker_kill": "kill -9 the check-back responder (rocketbox checker)",
    "redis_restart_kept": "kill -9 Redis, start it again with its append-only file",
    "redis_restart_lost": "kill -9 Redis, start it again without its data",
    "pg_restart": "pg_ctl restart -m immediate under load",
    "relay_broker_delay": "200 ms per chunk each way between relay and broker",
    "relay_broker_cut": "no connection between relay and broker",
    "app_pg_delay": "50 ms per chunk each way between the app and PostgreSQL",
    "app_pg_cut": "no connection between the app and PostgreSQL",
    "held_snapshot": "a REPEATABLE READ transaction held open (vacuum blocked)",
    "broker_disk_full": "the broker's tmpfs filled to the last byte",
}
_DELAY_MS = {"relay_broker_delay": 200.0, "app_pg_delay": 50.0}
_LINK_KINDS = ("relay_broker_delay", "relay_broker_cut", "app_pg_delay", "app_pg_cut")
#: outage lengths drawn for a combined schedule, seconds
_LENGTH = (3.0, 12.0)


@dataclass
class Fault:
    kind: str
    start: float
    length: float
    #: monotonic times the fault was applied and cleared (filled in by the run)
    applied_at: float | None = None
    cleared_at: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def end(self) -> float:
        return self.start + self.length

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def single(kind: str, start: float, length: float) -> list[Fault]:
    if kind not in KINDS:
        raise ValueError(f"unknown fault {kind!r}; one of {', '.join(KINDS)}")
    return [Fault(kind, start, length)]


def combined_schedule(seed: int, seconds: float, warmup: float, *, kinds: list[str],
                      tail: float) -> list[Fault]:
    """Every kind once, in a seeded order, at seeded times within ``[warmup, seconds - tail]``;
    about one fault in three overlaps the one before it."""
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    span = seconds - warmup - tail
    slot = span / max(1, len(order))
    faults: list[Fault] = []
    for i, kind in enumerate(order):
        length = round(rng.uniform(*_LENGTH), 1)
        start = warmup + i * slot + rng.uniform(0, max(0.0, slot - length))
        if i and rng.random() < 1 / 3:  # overlap the previous fault
            previous = faults[-1]
            start = previous.start + rng.uniform(0, previous.length)
        faults.append(Fault(kind, round(start, 1), min(length, seconds - tail - start)))
    return sorted(faults, key=lambda f: f.start)


class HeldSnapshot:
    """A transaction that holds its snapshot (and so every dead tuple since) until released."""

    def __init__(self, libpq_url: str) -> None:
        self._conn = psycopg.connect(libpq_url)
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self._conn.execute("SELECT count(*) FROM rocketbox_transaction")

    def release(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._conn.rollback()
        self._conn.close()


_held: dict[int, HeldSnapshot] = {}
#: Redis faults in force: Redis stays down while any is (two overlapping restarts once
#: started a second server whose bind failed, and the first, no longer tracked, leaked)
_redis_down: set[int] = set()
_lock = threading.Lock()
#: link faults in force: a link is cut while any cut is, else delayed while any delay is
_links: dict[str, list[str]] = {"relay": [], "app": []}


def _sync_link(c: Cluster, link: str) -> None:
    proxy = c.relay_proxy if link == "relay" else c.pg_proxy
    active = _links[link]
    if any(kind.endswith("_cut") for kind in active):
        proxy.down()
    else:
        proxy.up(max((_DELAY_MS[k] for k in active if k in _DELAY_MS), default=0.0))


def _link_fault(c: Cluster, kind: str, on: bool) -> None:
    link = "relay" if kind.startswith("relay") else "app"
    with _lock:
        if on:
            _links[link].append(kind)
        elif kind in _links[link]:
            _links[link].remove(kind)
    _sync_link(c, link)


def _fill(directory: Path) -> int:
    """Write ``directory/filler`` until the disk is full; returns the bytes written."""
    written = 0
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 4096, 1):  # big pieces, then the last bytes
            with contextlib.suppress(OSError):
                while True:
                    written += os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return written


def apply(c: Cluster, fault: Fault) -> None:
    kind = fault.kind
    if kind == "relay_kill":
        c.relay.kill()
    elif kind == "broker_kill":
        c.kill_broker()
    elif kind == "checker_kill":
        c.checker.kill()
    elif kind in ("redis_restart_kept", "redis_restart_lost"):
        with _lock:
            _redis_down.add(id(fault))
        c.kill_redis(keep_data=kind == "redis_restart_kept")
    elif kind == "pg_restart":
        c.restart_postgres()  # the outage is the restart itself; clear() has nothing to do
    elif kind in _LINK_KINDS:
        _link_fault(c, kind, True)
    elif kind == "held_snapshot":
        with _lock:
            _held[id(fault)] = HeldSnapshot(c.pg.libpq_url)
    elif kind == "broker_disk_full":
        if not c.tmpfs:
            fault.notes.append("skipped: the broker's data dir is not on its own tmpfs "
                               "(needs root for mount)")
            return
        fault.notes.append(f"filled {_fill(c.broker_dir) / 1e6:.1f} MB")
    else:
        raise ValueError(f"unknown fault {kind!r}")


def clear(c: Cluster, fault: Fault) -> None:
    kind = fault.kind
    if kind == "relay_kill":
        c.relay.start()
    elif kind == "broker_kill":
        c.start_broker()
    elif kind == "checker_kill":
        c.checker.start()
    elif kind in ("redis_restart_kept", "redis_restart_lost"):
        with _lock:
            _redis_down.discard(id(fault))
            last = not _redis_down
        if last:
            c.start_redis()
    elif kind in _LINK_KINDS:
        _link_fault(c, kind, False)
    elif kind == "held_snapshot":
        with _lock:
            held = _held.pop(id(fault), None)
        if held is not None:
            held.release()
    elif kind == "broker_disk_full":
        with contextlib.suppress(FileNotFoundError):
            os.unlink(c.broker_dir / "filler")
