"""The demo's Spark audit: its ``rocketbox audit`` arguments, and running it as a part.

It runs ``spark.audit_job`` over the demo's files (the shop's SQLite database
through JDBC, and the broker's commit log or a broker export) as a part like
the others, and reads its ``--json`` summary back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from examples.demo.run import Demo

__all__ = ["audit_command", "spark_audit"]


def audit_command(work: Path, slo: float, as_of: str, *, export: Path | None = None
                  ) -> list[str]:
    """The Spark audit the demo runs, as ``rocketbox audit`` arguments.

    ``--grace 0``: the demo waited until every committed order was consumed,
    so nothing is in flight any more and every row is judged, none left
    ``pending``. ``--as-of`` fixes the audit's clock, and ``--slo`` is the
    demo's (see :data:`audit.BASE_SLO`): the same command run again later
    says the same.
    """
    broker = ["--commitlog", str(work / "broker")] if export is None else \
        ["--broker-export", str(export)]
    return ["--jdbc-url", f"jdbc:sqlite:{work / 'shop.sqlite'}", *broker,
            "--grace", "0", "--slo", f"{slo:.1f}", "--as-of", as_of]


def spark_audit(demo: Demo, env: dict[str, str], timeout: float, args: list[str]
                ) -> tuple[str, dict[str, int]]:
    """Run ``spark.audit_job args`` over the demo's files: what it said, and divergent counts.

    The counts are the audit's divergent transactions per category (from its
    ``--json`` summary); empty when it found none or could not run.
    """
    work = demo.work
    part = demo.part("spark-audit", [sys.executable, "-m", "spark.audit_job", *args,
                                     "--json", str(work / "audit.json"),
                                     "--html", str(work / "audit.html"), "--quiet"], env)
    try:
        code = part.wait(timeout)
    except subprocess.TimeoutExpired:
        part.stop()
        return f"timed out after {timeout:.0f}s (skipped)", {}
    if code == 0:
        return f"clean (report: {work / 'audit.html'})", {}
    if code == 1:
        summary = json.loads((work / "audit.json").read_text(encoding="utf-8"))
        counts = {str(c): int(n) for c, n in summary["counts"].items()
                  if c not in ("ok", "pending") and n}
        if not counts:  # categories the demo does not know: the total still counts
            counts = {"divergent": int(summary.get("divergent") or 1)}
        return f"divergences (see {work / 'audit.json'})", counts
    tail = part.output().strip().splitlines()[-1:] or ["no output"]
    return f"could not run, skipped: {tail[0]} (log: {part.log_path})", {}
