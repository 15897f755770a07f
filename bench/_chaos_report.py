"""The chaos section of ``bench/README.md``, rebuilt from ``bench/results/chaos-*.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _common import update_readme_section

__all__ = ["readme_table"]

#: a single fault's units must be visible within sweep_interval + this, after it clears
BOUND_SLACK_S = 5.0


def _faults(run: dict[str, Any]) -> str:
    """Each fault and its length; one whose apply or clear failed is marked (see its notes)."""
    return ", ".join(f"{f['kind']} {f['length']:.0f}s"
                     + (" (**" + "; ".join(n.split(":")[0] for n in f["notes"] if "failed" in n)
                        + "**)" if any("failed" in n for n in f["notes"]) else "")
                     for f in run["faults"])


def _row(label: str, run: dict[str, Any], sweep: float) -> str:
    inv, t = run["invariant"], run["timings"]
    lat = t["visible_ms_outside_faults"]
    worst = max((f["visible_after_clear_s"] for f in t["faults"]), default=0.0)
    during = sum(f["commits_during"] for f in t["faults"])
    audit = run.get("audit")
    audit_text = ("skipped" if audit is None else "timed out" if audit.get("timed_out")
                  else "killed, no verdict" if audit.get("killed")
                  else "clean" if audit["clean"] else f"exit {audit['exit']}")
    if audit is not None:
        audit_text += f" ({audit['seconds']:.0f} s)"
    stopped = "stopped" if run["relay_exit"] is not None else "ran"
    pending = f" (pending {inv['pending']})" if inv.get("pending") else ""
    # rows never relayed (the drain timed out) have no "visible" time: say so
    worst_text = "never" if pending else f"{worst:.1f}"
    drain = "never" if pending else t["drain_after_last_fault_s"]
    return (f"| {label} | {run['seed']} | {run['seconds']:.0f} | {_faults(run)} | "
            f"{run['rate']:.0f} | "
            f"{inv['units_committed']} / {inv['units_rolled_back']} / {inv['units_failed']} | "
            f"{during} | {inv['lost']} / {inv['phantom']} / {inv['duplicate']}"
            f"{pending} | "
            f"{inv['consumer_lost']} / {inv['consumer_redeliveries']} | "
            f"{worst_text} (bound {sweep + BOUND_SLACK_S:.0f}) | "
            f"{drain} | {lat['p50']} / {lat['p99']} | "
            f"{stopped}, {run['relay_unrecoverable']} | {audit_text} | {_load(run)} |")


def _load(run: dict[str, Any]) -> str:
    """The 1-minute load average when the run started and when it ended."""
    start, end = run.get("load_average"), run.get("load_average_end")
    return " / ".join(f"{x[0]:.1f}" if x else "?" for x in (start, end))


def _vacuum(label: str, doc: dict[str, Any]) -> list[str]:
    s = doc["vacuum"]["summary"]
    lines = [f"Blocked vacuum (`{label}`, {s['rate']:.0f} tx/s offered, snapshot held "
             f"{s['hold_s']:.0f} s, load {doc['vacuum']['load_average']}):", "",
             "| phase | visible/s | relay capacity rows/s | max dead tuples | max table bytes | "
             "max backlog |", "|---|---|---|---|---|---|"]
    for phase in ("before", "during", "after"):
        p = s[phase]
        lines.append(f"| {phase} | {p['visible_per_s']} | {p['capacity_rows_per_s']} | "
                     f"{p['max_dead']} | {p['max_bytes']} | {p['max_unrelayed']} |")
    final = s["final"]
    lines += ["", f"Capacity during / before: {s['during_vs_before_capacity']}. After a final "
                  f"VACUUM: {final['live']} live, {final['dead']} dead tuples, "
                  f"{final['bytes']} bytes.", ""]
    return lines


def readme_table(results: Path, readme: Path) -> None:
    header = ["| run | seed | load, s | faults | tx/s | committed / rolled back / failed | "
              "commits in outages | lost / phantom / duplicate | consumer lost / redelivered | "
              "worst visible after clear, s | drain after last fault, s | p50 / p99 ms outside "
              "faults | relay (stopped itself?, unrecoverable errors) | audit (its time) | "
              "load 1 min, start / end |",
              "|" + "---|" * 15]
    rows: list[str] = []
    extra: list[str] = []
    for path in sorted(results.glob("chaos-*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        label = path.stem.removeprefix("chaos-")
        if "vacuum" in doc:
            extra += _vacuum(label, doc)
        for run in doc.get("runs", []):
            rows.append(_row(label, run, doc.get("sweep_interval_s", 5.0)))
    body = [*header, *rows, "", *extra] if rows else extra
    update_readme_section(readme, "chaos", "\n".join(body))
