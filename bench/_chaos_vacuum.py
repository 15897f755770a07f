"""The blocked-vacuum run: a snapshot held for minutes while the relay works at load.

A ``REPEATABLE READ`` transaction that has read the outbox table stays open
for ``--hold`` seconds, so no dead tuple younger than it can be removed
(VACUUM and autovacuum run, and skip them); the relay's claims (``FOR UPDATE
SKIP LOCKED`` on the pending rows) and updates (``relayed_at``) step over more
and more of them. Three phases: *before* (60 s), *during* (the hold), *after*
(120 s). Every 5 s the run samples the consumer's count, the unrelayed
backlog, ``n_live_tup`` / ``n_dead_tup`` and the table's total size.

Relay throughput is measured twice per phase:

* *visible/s*: units the consumer saw per second, which is the offered rate
  whenever the relay keeps up;
* *capacity*: near the end of each phase the relay is killed for 10 s (a
  backlog of ``10 * rate`` rows builds up), started again, and the rows it
  relayed per second until the backlog is gone (watched at most 30 s) are its
  capacity at that point.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from _chaos_check import unrelayed
from _chaos_cluster import Cluster, cluster
from _chaos_faults import HeldSnapshot
from _chaos_load import Consumer, start_producer, wait_relaying
from _common import TMP_DIR, load_average, utc_now

__all__ = ["run_vacuum"]

BEFORE, AFTER, SAMPLE, PROBE_OUTAGE = 60.0, 120.0, 5.0, 10.0
#: the capacity probe watches the drain at most this long (rows relayed / time watched)
PROBE_DRAIN = 30.0


def _stats(c: Cluster) -> dict[str, int]:
    row = c.sql("SELECT n_live_tup, n_dead_tup, pg_total_relation_size(relid), "
                "coalesce(autovacuum_count, 0) + coalesce(vacuum_count, 0) "
                "FROM pg_stat_user_tables WHERE relname = 'rocketbox_transaction'")[0]
    live, dead, size, vacuums = (int(v) for v in row)  # type: ignore[call-overload]
    return {"live": live, "dead": dead, "bytes": size, "vacuums": vacuums}


def _capacity(c: Cluster, consumer: Consumer) -> dict[str, float]:
    """Kill the relay PROBE_OUTAGE s, restart it, time the drain of what piled up."""
    c.relay.kill()
    time.sleep(PROBE_OUTAGE)
    backlog = unrelayed(c)
    seen0, t0 = len(consumer.seen()), time.monotonic()
    c.relay.start()
    while unrelayed(c) > max(50, backlog // 20) and time.monotonic() - t0 < PROBE_DRAIN:
        time.sleep(0.5)
    seconds = time.monotonic() - t0
    relayed = len(consumer.seen()) - seen0
    return {"backlog": backlog, "drain_s": round(seconds, 1),
            "rows_per_s": round(relayed / seconds, 1) if seconds else 0.0}


def run_vacuum(args: argparse.Namespace) -> dict[str, Any]:
    TMP_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="chaos-vacuum-", dir=TMP_DIR))
    total = BEFORE + args.hold + AFTER
    args.seconds = total
    phases = {"before": (0.0, BEFORE), "during": (BEFORE, BEFORE + args.hold),
              "after": (BEFORE + args.hold, total)}
    started, load = utc_now(), load_average()
    try:
        return _run(args, work, phases, total, started, load)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(args: argparse.Namespace, work: Path, phases: dict[str, tuple[float, float]],
         total: float, started: str, load: list[float]) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    probes: dict[str, dict[str, float]] = {}
    with cluster(work) as c, Consumer(c.broker_native) as consumer:
        wait_relaying(c, consumer)
        producer = start_producer(c, args, args.seed, work / "units.jsonl")
        t0 = time.monotonic()
        held: HeldSnapshot | None = None
        probe_at = {name: end - 40.0 for name, (_s, end) in phases.items()}
        while (now := time.monotonic() - t0) < total:
            if held is None and BEFORE <= now < BEFORE + args.hold:
                held = HeldSnapshot(c.pg.libpq_url)
            elif held is not None and now >= BEFORE + args.hold:
                held.release()
                held = None
            for name, at in probe_at.items():
                if name not in probes and now >= at:
                    probes[name] = _capacity(c, consumer)
            samples.append({"t": round(now, 1), "seen": len(consumer.seen()),
                            "unrelayed": unrelayed(c), **_stats(c)})
            time.sleep(SAMPLE)
        if held is not None:
            held.release()
        producer.wait(300)
        c.sql("VACUUM rocketbox_transaction")
        final = _stats(c)
        load_end = load_average()
    summary: dict[str, Any] = {"hold_s": args.hold, "rate": args.rate, "final": final}
    for name, (start, end) in phases.items():
        inside = [s for s in samples if start <= s["t"] < end]
        # visible/s outside the capacity probe (its outage and drain distort it)
        steady = [s for s in inside if s["t"] < probe_at[name] - 1]
        rate = ((steady[-1]["seen"] - steady[0]["seen"]) / (steady[-1]["t"] - steady[0]["t"])
                if len(steady) > 1 else None)
        summary[name] = {"visible_per_s": round(rate, 1) if rate is not None else None,
                         "capacity_rows_per_s": probes.get(name, {}).get("rows_per_s"),
                         "max_dead": max((s["dead"] for s in inside), default=None),
                         "max_bytes": max((s["bytes"] for s in inside), default=None),
                         "max_unrelayed": max((s["unrelayed"] for s in inside), default=None)}
    before_cap = summary["before"]["capacity_rows_per_s"]
    during_cap = summary["during"]["capacity_rows_per_s"]
    summary["during_vs_before_capacity"] = (round(during_cap / before_cap, 2)
                                            if before_cap and during_cap else None)
    return {"started": started, "load_average": load, "load_average_end": load_end,
            "samples": samples, "probes": probes, "summary": summary}
