"""What a chaos run found: the invariant, from three places, and the timings.

The invariant (docs/design.md): every transaction the database committed has
exactly one committed message in the broker, and a rolled-back one none.

* **database**: ``chaos_unit`` rows (the truth: a unit the producer saw fail
  may have committed) and their outbox rows (``rocketbox_transaction``);
* **commit log**: ``broker-lite inspect``, commit records per transaction id:
  *lost* = a committed tx_id with none although the relay is done with its row
  (a row still unrelayed when the drain timed out is *pending*, counted apart),
  *duplicate* = with more than one, *phantom* = a commit record whose tx_id
  the database does not have;
* **consumer group**: the units it saw; *lost* / *phantom* as above, and its
  redeliveries (at least once: not a duplicate commit).

Timings: commits during each outage, how long after each fault cleared the
last unit committed before then became visible (``visible_after_clear``),
how long after the last fault the backlog drained, and commit-to-visible
p50/p99 for units committed outside every fault window.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _chaos_cluster import READY_TIMEOUT, UNIT_TABLE, Cluster, python_env
from _chaos_faults import Fault
from _common import REPO_ROOT

from tests.support.commitlog import broker_records, commit_counts

__all__ = ["audit", "database_truth", "invariant", "timings"]

#: the audit's "late" bound: outages make units late by design, so the run asks the audit
#: about lost / phantom / duplicate / stuck / mismatched rows, and reports lateness itself
AUDIT_SLO_S = 3600.0
UNIT_OF_BODY = "convert_from(t.body, 'UTF8')::jsonb->>'u'"


def database_truth(c: Cluster) -> dict[str, str]:
    """Committed units -> their outbox tx_id (a unit without a row maps to '')."""
    rows = c.sql(f"SELECT u.unit_id, coalesce(t.tx_id, '') FROM {UNIT_TABLE} u "
                 f"LEFT JOIN rocketbox_transaction t ON {UNIT_OF_BODY} = u.unit_id")
    return {str(unit): str(tx) for unit, tx in rows}


def unrelayed(c: Cluster) -> int:
    count = c.sql("SELECT count(*) FROM rocketbox_transaction WHERE relayed_at IS NULL")[0][0]
    assert isinstance(count, int), count  # count(*) is a bigint, which psycopg reads as an int
    return count


def invariant(c: Cluster, truth: dict[str, str], seen: dict[str, float],
              redeliveries: int, produced: list[tuple[str, str, float]]) -> dict[str, Any]:
    counts = commit_counts(broker_records(c.broker_dir, timeout=READY_TIMEOUT))
    committed = set(truth.values()) - {""}
    acknowledged = {u for u, outcome, _ in produced if outcome == "commit"}
    rolled_back = {u for u, outcome, _ in produced if outcome == "rollback"}
    topic_tx = {str(tx) for (tx,) in c.sql("SELECT tx_id FROM rocketbox_transaction")}
    # still unrelayed when the drain timed out: late, not (yet) lost; counted apart
    pending = {str(tx) for (tx,) in c.sql("SELECT tx_id FROM rocketbox_transaction "
                                          "WHERE relayed_at IS NULL")}
    pending_units = {u for u, tx in truth.items() if tx in pending}
    return {
        "units_committed": len(truth),
        "units_acknowledged": len(acknowledged),
        "units_rolled_back": len(rolled_back),
        "units_failed": sum(1 for _, outcome, _ in produced if outcome == "error"),
        "units_without_outbox_row": sum(1 for tx in truth.values() if not tx),
        "acknowledged_not_in_db": len(acknowledged - truth.keys()),
        "rolled_back_in_db": len(rolled_back & truth.keys()),
        "pending": len(pending),
        "lost": sum(1 for tx in committed - pending if counts.get(tx, 0) == 0),
        "duplicate": sum(1 for tx in committed if counts.get(tx, 0) > 1),
        "phantom": sum(1 for tx in counts if tx not in topic_tx),
        "consumer_lost": len(truth.keys() - seen.keys() - pending_units),
        "consumer_phantom": len(seen.keys() - truth.keys()),
        "consumer_redeliveries": redeliveries,
        "commit_records": sum(counts.values()),
    }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timings(faults: list[Fault], produced: list[tuple[str, str, float]],
            truth: dict[str, str], seen: dict[str, float]) -> dict[str, Any]:
    """Per fault: commits during it and time to visible after it cleared; overall: drain
    time and commit-to-visible outside the windows (units the database has and the
    consumer saw)."""
    committed = [(u, at) for u, outcome, at in produced if outcome == "commit" and u in truth]
    per_fault = []
    for f in faults:
        if f.applied_at is None or f.cleared_at is None:
            continue
        during = sum(1 for _, at in committed if f.applied_at <= at <= f.cleared_at)
        pending = [seen[u] for u, at in committed if at <= f.cleared_at and u in seen
                   and seen[u] > f.cleared_at]
        unseen = sum(1 for u, at in committed if at <= f.cleared_at and u not in seen)
        per_fault.append({"kind": f.kind, "commits_during": during, "never_seen": unseen,
                          "outage_s": round(f.cleared_at - f.applied_at, 2),
                          "visible_after_clear_s": round(max(pending) - f.cleared_at, 2)
                          if pending else 0.0,
                          "notes": f.notes})
    windows = [(f.applied_at, f.cleared_at) for f in faults
               if f.applied_at is not None and f.cleared_at is not None]
    outside = [seen[u] - at for u, at in committed if u in seen
               and not any(a <= at <= b for a, b in windows)]
    last_clear = max((b for _, b in windows), default=None)
    drained = max((seen[u] for u, _ in committed if u in seen), default=None)
    p50, p99 = _percentile(outside, 0.5), _percentile(outside, 0.99)
    return {
        "faults": per_fault,
        "drain_after_last_fault_s": round(max(0.0, drained - last_clear), 2)
        if drained is not None and last_clear is not None else None,
        "visible_ms_outside_faults": {
            "count": len(outside),
            "p50": round(p50 * 1000, 1) if p50 is not None else None,
            "p99": round(p99 * 1000, 1) if p99 is not None else None,
        },
    }


def audit(c: Cluster, out: Path, timeout: float) -> dict[str, Any]:
    """``rocketbox audit`` over the status table and the broker's commit log."""
    started = time.monotonic()
    argv = [sys.executable, "-m", "outbox", "audit", "--jdbc-url",
            f"jdbc:postgresql://127.0.0.1:{c.pg.port}/postgres", "--user", "postgres",
            "--commitlog", str(c.broker_dir), "--json", str(out), "--quiet",
            "--slo", str(AUDIT_SLO_S)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=python_env(),
                              cwd=REPO_ROOT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"exit": None, "seconds": round(time.monotonic() - started, 1),
                "timed_out": True, "clean": None}
    result: dict[str, Any] = {"exit": done.returncode,
                              "seconds": round(time.monotonic() - started, 1)}
    if done.returncode < 0:  # killed (by the operator, or the OOM killer): no verdict
        result.update(killed=-done.returncode, clean=None)
        return result
    if out.exists():
        summary = json.loads(out.read_text(encoding="utf-8"))
        result["summary"] = summary.get("counts", summary)
    if done.returncode not in (0, 1):
        result["stderr"] = done.stderr[-2000:]
    result["clean"] = done.returncode == 0
    return result
