"""bench/storage.py's results: the result document, the printed tables, the README section.

:func:`case_result` and :func:`target_results` make the JSON of
bench/results/storage.json; :func:`results_table` and
:func:`targets_table` print it; :func:`markdown_section` renders the
``storage`` section of bench/README.md (with the ``--versus`` columns when
there is one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import _report as report
from _common import machine_summary
from _storage_cases import Comparison, Side
from rich.table import Table

__all__ = [
    "TARGETS",
    "case_result",
    "code_summary",
    "markdown_section",
    "results_table",
    "target_results",
    "targets_table",
]

TARGETS = {
    "async-1": ("records_per_s", 150_000.0, "async put, 1 appender, records/s"),
    "sync-64": ("records_per_s", 30_000.0, "sync put, 64 appender threads, records/s"),
    "sync-asyncio-64": ("records_per_s", 30_000.0,
                        "sync, 64 asyncio appenders (FlushGate), records/s"),
    "recovery-warm": ("mb_per_s", 300.0, "crash recovery with CRC checks, MB/s"),
}


def case_result(case: Comparison) -> dict[str, Any]:
    """A case as JSON: what was compared, medians, rates, ratio, every sample."""

    def side(s: Side) -> dict[str, Any]:
        secs = s.seconds()
        extras = sorted({k for m in s.samples for k in m.extra})
        return {
            "what": s.what,
            "median_seconds": secs.median,
            "records_per_s": case.rate(s, "records"),
            "mb_per_s": case.rate(s, "mb"),
            "spread": secs.spread,
            "samples_seconds": secs.values,
            **{f"samples_{k}": [m.extra.get(k) for m in s.samples] for k in extras},
        }

    ratios = case.ratios()
    result = {
        "name": case.name,
        "kind": case.kind,
        **case.params,
        "records": case.records,
        "bytes": case.nbytes,
        "ours": side(case.ours),
        "bound": side(case.bound),
        "ratio_meaning": "ours throughput / bound throughput, median over paired repetitions",
        "ratio_median": ratios.median,
        "ratio_samples": ratios.values,
    }
    if case.versus is not None:
        vs_bound, ours_vs = case.ratios(case.versus), case.ratios(case.ours, case.versus)
        result |= {
            "versus": side(case.versus),
            "versus_ratio_median": vs_bound.median,
            "versus_ratio_samples": vs_bound.values,
            "ours_vs_versus_meaning": "ours throughput / versus throughput, paired",
            "ours_vs_versus_median": ours_vs.median,
            "ours_vs_versus_samples": ours_vs.values,
        }
    return result


def target_results(cases: Sequence[Comparison]) -> list[dict[str, Any]]:
    by_name = {c.name: c for c in cases}
    results: list[dict[str, Any]] = []
    for name, (metric, goal, text) in TARGETS.items():
        case = by_name.get(name)
        if case is None:
            continue
        value = case.rate(case.ours, "records" if metric == "records_per_s" else "mb")
        results.append({"case": name, "description": text, "metric": metric,
                        "target": goal, "measured": value, "met": value >= goal})
    return results


def results_table(cases: Sequence[Comparison], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    versus = any(c.versus for c in cases)
    cols = ["case", "records", "ours rec/s", "ours MB/s", "bound rec/s", "bound MB/s",
            "ours/bound", "ratio range"]
    if versus:
        cols += ["vs rec/s", "vs/bound", "ours/vs", "ours/vs range"]
    for col in cols:
        table.add_column(col, justify="left" if col == "case" else "right")
    for case in cases:
        ratios = case.ratios()
        row = [
            case.name, f"{case.records:,}",
            f"{case.rate(case.ours, 'records'):,.0f}", f"{case.rate(case.ours, 'mb'):,.1f}",
            f"{case.rate(case.bound, 'records'):,.0f}", f"{case.rate(case.bound, 'mb'):,.1f}",
            f"{ratios.median:.2f}", f"{min(ratios.values):.2f}-{max(ratios.values):.2f}",
        ]
        if case.versus is not None:
            ours_vs = case.ratios(case.ours, case.versus)
            row += [f"{case.rate(case.versus, 'records'):,.0f}",
                    f"{case.ratios(case.versus).median:.2f}", f"{ours_vs.median:.3f}",
                    f"{min(ours_vs.values):.2f}-{max(ours_vs.values):.2f}"]
        elif versus:
            row += ["", "", "", ""]
        table.add_row(*row)
    return table


def _target_cell(target: Mapping[str, Any], key: str) -> str:
    return f"{target[key]:,.0f}"


def targets_table(targets: Sequence[dict[str, Any]]) -> Table:
    return report.targets_table(targets, _target_cell)


def code_summary(code: dict[str, Any]) -> str:
    """``commit abc123 (extracted)`` or ``working tree at abc123, with uncommitted ...``."""
    return report.code_summary(code, ("broker_lite/storage",))


def markdown_section(result: dict[str, Any]) -> str:
    """The generated part of bench/README.md: machine, parameters, results, targets."""
    params = result["parameters"]
    versus = result.get("versus")
    lines = [
        f"Last full run: {result['generated_at']}, {params['repeat']} repetitions (medians).",
        f"Code measured: {code_summary(result['code'])}"
        + (f"; versus: broker_lite as committed at `{versus['commit'][:12]}` (--versus), "
           "run in a child process between ours and the bound, every repetition"
           if versus else "") + ".",
        f"Machine: {machine_summary(result['machine'])}; data dir on the repository's disk; "
        f"load average {report.load_text(result['load_average'])}.",
        f"Record: {params['body_size']} B body, {params['record_size']} B encoded; "
        f"segments of {params['segment_size'] // 2**20} MiB. MB = 10^6 bytes.",
        "",
        "| case | records | ours rec/s | ours MB/s | bound rec/s | bound MB/s | ours/bound "
        "| ratio range |" + (" versus rec/s | versus/bound | ours/versus | range |"
                             if versus else ""),
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|---:|---:|" if versus else ""),
    ]
    for c in result["cases"]:
        row = (
            f"| {c['name']} | {c['records']:,} | {c['ours']['records_per_s']:,.0f} | "
            f"{c['ours']['mb_per_s']:,.1f} | {c['bound']['records_per_s']:,.0f} | "
            f"{c['bound']['mb_per_s']:,.1f} | {c['ratio_median']:.2f} | "
            f"{min(c['ratio_samples']):.2f}-{max(c['ratio_samples']):.2f} |"
        )
        if "versus" in c:
            row += (f" {c['versus']['records_per_s']:,.0f} | {c['versus_ratio_median']:.2f} | "
                    f"{c['ours_vs_versus_median']:.3f} | {min(c['ours_vs_versus_samples']):.2f}-"
                    f"{max(c['ours_vs_versus_samples']):.2f} |")
        elif versus:
            row += " | | | |"
        lines.append(row)
    lines += report.markdown_targets(result["targets"], _target_cell)
    sync = [c for c in result["cases"] if str(c.get("mode", "")).startswith("sync")]
    if sync:
        lines += ["", "Records per `fdatasync` achieved by group commit (median; the bound "
                  "does N): " + ", ".join(f"{c['name']}: {_per_sync(c):.1f}" for c in sync) + "."]
    return "\n".join(lines)


def _per_sync(case: dict[str, Any]) -> float:
    syncs = [s for s in case["ours"].get("samples_fdatasyncs", []) if s]
    return case["records"] / sorted(syncs)[len(syncs) // 2] if syncs else float("nan")
