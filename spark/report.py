"""The JSON summary and the console table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from spark.categories import ACTIONS, CATEGORIES, DIVERGENT, INVARIANT
from spark.summary import LATENCY_PER_DECADE, Summary

__all__ = ["print_summary", "summary_dict", "write_json"]


def _window(summary: Summary) -> dict[str, Any]:
    w = summary.window
    if w is None:
        return {}
    return {"since_ms": w.since_ms, "until_ms": w.until_ms, "as_of_ms": w.now_ms,
            "grace_ms": w.grace_ms, "slo_ms": w.slo_ms, "stuck_after_ms": w.stuck_ms}


def summary_dict(summary: Summary) -> dict[str, Any]:
    """The ``--json`` document: ``counts`` first, then the evidence behind the charts."""
    return {
        "counts": {c: summary.counts.get(c, 0) for c in CATEGORIES},
        "divergent": summary.divergent,
        "invariant_violations": sum(summary.counts.get(c, 0) for c in INVARIANT),
        "needs_action": [{"category": c, "count": summary.counts[c], "action": ACTIONS[c]}
                         for c in DIVERGENT if summary.counts.get(c)],
        "divergent_ids": [{"tx_id": tx, "category": c, "topic": t, "detail": d}
                          for tx, c, t, d in summary.divergent_ids],
        "out": summary.out,
        "segments": summary.segments,
        "corrupt": [{"segment": s, "offset": o, "reason": r} for s, o, r in summary.problems],
        "latency_ms": {"p50": summary.latency_p50_ms, "p99": summary.latency_p99_ms,
                       "max": summary.latency_max_ms,
                       "histogram": {"scale": "log10", "buckets_per_decade": LATENCY_PER_DECADE,
                                     "buckets": [{"from_ms": b.from_ms, "to_ms": b.to_ms,
                                                  "count": b.count}
                                                 for b in summary.latency]}},
        "top_topics": [{"topic": t, "divergent": n} for t, n in summary.top_topics],
        "timeline": {"bucket_ms": summary.bucket_ms,
                     "points": [{"start_ms": s, "category": c, "count": n}
                                for s, c, n in summary.timeline]},
        "window": _window(summary),
        **summary.extra,
    }


def write_json(summary: Summary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary_dict(summary), indent=2) + "\n", encoding="utf-8")


def print_summary(summary: Summary, file: IO[str] | None = None) -> None:
    """A rich table of the counts, what to do about each divergence, the corrupt stretches."""
    console = Console(file=file, highlight=False)
    table = Table(title="rocketbox audit", title_justify="left")
    table.add_column("category")
    table.add_column("tx_ids", justify="right")
    for cat in CATEGORIES:
        n = summary.counts.get(cat, 0)
        table.add_row(cat, str(n), style="bold red" if cat in DIVERGENT and n else "")
    console.print(table)
    for cat in DIVERGENT:
        if summary.counts.get(cat):
            console.print(f"[bold]{cat}[/bold]: {ACTIONS[cat]}")
    if summary.latency_p50_ms is not None:
        console.print(f"commit-to-visible latency: p50 {summary.latency_p50_ms:.0f} ms, "
                      f"p99 {summary.latency_p99_ms:.0f} ms")
    for segment, offset, reason in summary.problems:
        console.print(f"[red]corrupt commit log[/red] segment {segment} offset {offset}: "
                      f"{reason}")
    broken = sum(summary.counts.get(c, 0) for c in INVARIANT)
    verdict = "[bold red]DIVERGENT[/]" if summary.divergent else "[green]clean[/]"
    export = summary.extra.get("broker_export")
    read = (f"the broker export ({export['files']} file(s), {export['messages']} message(s))"
            if export else f"{summary.segments} segment(s)")
    console.print(f"{verdict}: {summary.divergent} divergent tx_id(s) ({broken} against the "
                  f"invariant) over {read}")
