"""bench/relay.py's floors beside the SQL-only bound: what the machine allows our relay.

The SQL-only bound (:func:`_relay_legs.sql_bound`) runs alone, on an idle
broker and relay. Ours shares the machine's cores between PostgreSQL, the
relay worker, broker_lite and the consumer. Two floors, measured in the same
run right after the bound, say how fast each half of that is on its own:

* :func:`relay_floor`, **relay + SQL**: the product's ``Relay.drain``
  (``drain_lanes`` lanes, ``batch_size`` rows a pass) over a backlog, its
  broker calls answered in-process by :class:`InProcessTarget` (bench only)
  behind the product's own ``TargetPublisher``: every statement and all of
  the relay's Python, no broker, no consumer, no Celery.
* :func:`broker_floor`, **broker alone**: bench/broker.py's ``tx-batch-async``
  workload (``SEND_BATCH`` of 64 halves, then ``END_TRANSACTION_BATCH``, 8
  pairs in flight, 1 KiB bodies) against the run's own broker_lite, and the
  same workload in the relay's shape (``batch_size`` halves a request,
  ``drain_lanes`` in flight, the relay's 256-byte bodies): no database.

:func:`cpu_of` reads what a process and its descendants used (``/proc``), so
each run can say how many of the cores it kept busy and who used them.

:func:`machine_ceiling` adds the floors' CPU per row up: the rows/s our relay
could make if every core were busy all the time with nothing but that work.
It leaves out the broker client's own Python in the relay worker (the
in-process target skips it) and every wait, so no run of ours can pass it.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["SERVER_PIDS", "InProcessTarget", "broker_floor", "cpu_by_process", "cpu_of",
           "cpu_split", "machine_ceiling", "relay_floor"]

#: the harness's servers, by name (``postgres``, ``broker``): filled by ``harness()``
SERVER_PIDS: dict[str, int] = {}
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_of(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and every live descendant.

    A descendant that exited is not counted (a PostgreSQL backend that closed
    during a run); the runs keep their connections open.
    """
    return sum(cpu_by_process(root).values())


def cpu_by_process(root: int) -> dict[str, float]:
    """CPU seconds used so far by ``root`` and each live descendant, by ``PID NAME`` (its
    ``/proc`` command line, cut short)."""
    parent: dict[int, int] = {}
    spent: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text(encoding="ascii", errors="replace")
        except OSError:  # it exited meanwhile
            continue
        fields = raw.rpartition(")")[2].split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        spent[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    out: dict[str, float] = {}
    todo = [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        if pid in spent:
            try:
                name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                name = b"?"
            out[f"{pid} {name.decode(errors='replace').strip()[:60]}"] = spent[pid]
        todo.extend(children.get(pid, ()))
    return out


def cpu_split(pids: dict[str, int]) -> Callable[[], dict[str, float]]:
    """Start counting the CPU of ``pids`` (name: root pid) and of this process; the
    returned function gives the seconds each used since, ``harness`` being this one."""
    before = {name: cpu_of(pid) for name, pid in pids.items()}
    mine = time.process_time()

    def since() -> dict[str, float]:
        used = {name: cpu_of(pid) - before[name] for name, pid in pids.items()}
        used["harness"] = time.process_time() - mine
        return used

    return since


class InProcessTarget:
    """A :class:`~outbox.targets.base.Target` that answers at once, in-process (bench only).

    Every half is "stored" and every end "committed" at made-up offsets: what
    the relay would get from a broker that costs nothing.
    """

    description = "in-process answers (bench/_relay_floors.py)"

    def __init__(self) -> None:
        self._offsets = itertools.count()

    async def start(self) -> None:
        return None

    async def send_halves(self, messages: Sequence[Any]) -> list[Any]:
        from outbox.targets.base import HalfStored

        offsets = self._offsets
        return [HalfStored(m.tx_id, m.topic, next(offsets), next(offsets)) for m in messages]

    async def end_transactions(self, ends: Sequence[Any]) -> list[Any]:
        from outbox.targets.base import TxEnded

        offsets = self._offsets
        return [TxEnded(e.tx_id, next(offsets)) for e in ends]

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        return None

    async def close(self) -> None:
        return None


def relay_floor(db: str, batch_size: int, lanes: int, rows: int) -> dict[str, Any]:
    """Rows/s of ``Relay.drain`` over the ``rows`` due rows, the broker answered in-process."""
    from _relay_common import PRODUCER_GROUP, freeze_heap
    from sqlalchemy import create_engine

    from outbox import Outbox, RelaySettings
    from outbox.relay import Relay
    from outbox.targets.runner import TargetPublisher

    engine = create_engine(db, pool_size=lanes + 2)
    outbox = Outbox(engine=engine, broker="127.0.0.1:9", producer_group=PRODUCER_GROUP,
                    relay=RelaySettings(batch_size=batch_size, drain_lanes=lanes))
    publisher = TargetPublisher(InProcessTarget())
    relay = Relay(outbox, publisher, name="relay-floor")
    try:
        relay.run_once(only=["warm-up: no such row"])  # connections, statements, the loop
        freeze_heap()
        watch = cpu_split({"postgres": SERVER_PIDS["postgres"]}) \
            if "postgres" in SERVER_PIDS else None
        t0 = time.monotonic()
        report = relay.drain(max_passes=1_000_000)
        seconds = time.monotonic() - t0
        cpu = watch() if watch is not None else {}
    finally:
        publisher.close()
        engine.dispose()
    if report.relayed != rows:
        raise RuntimeError(f"relay floor relayed {report.relayed} of {rows} rows "
                           f"(failed {report.failed}: {report.errors[:3]})")
    return {"rows": report.relayed, "seconds": seconds,
            "per_s": report.relayed / seconds if seconds else 0.0, "batch_size": batch_size,
            "lanes": lanes, "cpu_s": cpu}


def broker_floor(broker: str, count: int, *, per_request: int, window: int,
                 body: bytes | None = None) -> dict[str, Any]:
    """Transactions/s of the broker alone: bench/broker.py's ``tx-batch`` workload (halves
    in ``SEND_BATCH``, ends in ``END_TRANSACTION_BATCH``, ``window`` pairs in flight)."""
    from _broker_cases import CaseSpec
    from _broker_ours import BrokerTx
    from _common import settle

    from broker_lite.client import AsyncAdmin, Message

    topic = f"RelayBrokerFloor{per_request}x{window}"
    spec = CaseSpec(f"tx-batch-async ({per_request} x {window})", "tx", "async", per_request,
                    window, count, "", "")

    async def run() -> tuple[float, float]:
        async with AsyncAdmin(broker) as admin:
            await admin.create_topic(topic)
        work = BrokerTx(broker, spec, topic)
        if body is not None:
            work.message = Message(topic, body)
        await work.open()
        try:
            cpu0 = cpu_of(SERVER_PIDS["broker"]) if "broker" in SERVER_PIDS else 0.0
            t0 = time.monotonic()
            await work.load()
            seconds = time.monotonic() - t0
            cpu = (cpu_of(SERVER_PIDS["broker"]) - cpu0) if "broker" in SERVER_PIDS else 0.0
            await work.verify()
        finally:
            await work.close()
        return seconds, cpu

    settle()
    seconds, broker_cpu = asyncio.run(run())
    return {"transactions": count, "seconds": seconds,
            "per_s": count / seconds if seconds else 0.0, "per_request": per_request,
            "window": window, "body_size": len(body) if body is not None else 1024,
            "broker_cpu_s": broker_cpu}


def machine_ceiling(floors: dict[str, Any], ours_cpu: dict[str, float], ours_rows: int,
                    cores: int) -> dict[str, Any]:
    """The most rows/s ``cores`` allow our relay: the CPU per row of the relay+SQL floor
    (relay and PostgreSQL), broker_lite's per transaction in the relay's shape and the
    consumer's in our run (``ours_cpu['harness']``), added up, every core busy."""
    relay = floors["relay_sql"]
    shape = floors["broker_relay_shape"]
    parts = {
        "relay_and_postgres_us": sum(relay["cpu_s"].values()) / relay["rows"] * 1e6
        if relay["cpu_s"] else 0.0,
        "broker_us": shape["broker_cpu_s"] / shape["transactions"] * 1e6,
        "consumer_us": ours_cpu.get("harness", 0.0) / ours_rows * 1e6,
    }
    per_row = sum(parts.values())
    return {"cores": cores, "cpu_us_per_row": parts, "per_s": cores * 1e6 / per_row
            if per_row else 0.0}
