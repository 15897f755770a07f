"""The JSON summary and the console table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.table import Table

from spark.classify import CATEGORIES, DIVERGENT
from spark.summary import Summary

__all__ = ["print_summary", "summary_dict", "write_json"]


def summary_dict(summary: Summary) -> dict[str, Any]:
    """The ``--json`` document: ``counts`` first, then the evidence behind the charts."""
    return {
        "counts": {c: summary.counts.get(c, 0) for c in CATEGORIES},
        "divergent": summary.divergent,
        "segments": summary.segments,
        "corrupt": [{"segment": s, "offset": o, "reason": r} for s, o, r in summary.problems],
        "latency_ms": {"p50": summary.latency_p50_ms, "p99": summary.latency_p99_ms,
                       "histogram": [{"le": b if b >= 0 else None, "count": n}
                                     for b, n in summary.latency]},
        "top_topics": [{"topic": t, "divergent": n} for t, n in summary.top_topics],
        "timeline": {"bucket_ms": summary.bucket_ms,
                     "points": [{"start_ms": s, "category": c, "count": n}
                                for s, c, n in summary.timeline]},
        **summary.extra,
    }


def write_json(summary: Summary, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary_dict(summary), indent=2) + "\n", encoding="utf-8")


def print_summary(summary: Summary, file: IO[str] | None = None) -> None:
    """A rich table of the counts, then one line per corrupt stretch."""
    console = Console(file=file, highlight=False)
    table = Table(title="rocketbox audit", title_justify="left")
    table.add_column("category")
    table.add_column("tx_ids", justify="right")
    for cat in CATEGORIES:
        n = summary.counts.get(cat, 0)
        style = "bold red" if cat in DIVERGENT and n else ""
        table.add_row(cat, str(n), style=style)
    console.print(table)
    if summary.latency_p50_ms is not None:
        console.print(f"commit-to-visible latency: p50 {summary.latency_p50_ms:.0f} ms, "
                      f"p99 {summary.latency_p99_ms:.0f} ms")
    for segment, offset, reason in summary.problems:
        console.print(f"[red]corrupt commit log[/red] segment {segment} offset {offset}: "
                      f"{reason}")
    verdict = "[bold red]DIVERGENT[/]" if summary.divergent else "[green]clean[/]"
    console.print(f"{verdict}: {summary.divergent} divergent tx_id(s) over "
                  f"{summary.segments} segment(s)")
