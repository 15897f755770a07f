"""bench/broker.py's results: which code was measured, the result document, tables, README.

:func:`measured_digest` fingerprints the parts of broker_lite on the
measured path; :func:`case_result` and :func:`target_results` make the
JSON of bench/results/broker.json; :func:`results_table` and
:func:`targets_table` print it; :func:`markdown_section` renders the
``broker`` section of bench/README.md.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import _report as report
from _broker_cases import REDIS_FSYNC, TARGETS, CaseSpec, Comparison, Side
from _common import machine_summary, source_digest
from rich.table import Table

from broker_lite.client import AsyncProducer

__all__ = [
    "MEASURED_PARTS",
    "case_result",
    "code_summary",
    "markdown_section",
    "measured_digest",
    "package_dir",
    "results_table",
    "target_results",
    "targets_table",
    "unit",
]

#: the parts of broker_lite on the measured path (others, e.g. the gRPC door, are not)
MEASURED_PARTS = ("client", "core", "protocol", "server", "storage")


def package_dir() -> Path:
    """The broker_lite directory actually imported (found from a module file: an editable
    install may make ``broker_lite`` itself a namespace package without ``__file__``)."""
    return Path(inspect.getfile(AsyncProducer)).resolve().parent.parent


def measured_digest() -> str:
    """SHA-256 over the measured parts of broker_lite (see :data:`MEASURED_PARTS`)."""
    return hashlib.sha256("".join(
        source_digest(package_dir() / part) for part in MEASURED_PARTS).encode()).hexdigest()


def unit(spec: CaseSpec) -> str:
    return "tx" if spec.kind == "tx" else "msg"


def case_result(case: Comparison) -> dict[str, Any]:
    count = case.spec.count

    def side(s: Side) -> dict[str, Any]:
        secs = s.seconds()
        return {
            "what": s.what,
            "median_seconds": secs.median,
            "per_s": s.rate(count),
            "spread": secs.spread,
            "server_cpu_us_per_item": s.cpu_per_message(count, "server"),
            "client_cpu_us_per_item": s.cpu_per_message(count, "client"),
            "samples_seconds": secs.values,
            "samples_server_cpu_s": [x.server_cpu for x in s.samples],
            "samples_client_cpu_s": [x.client_cpu for x in s.samples],
        }

    ratios = case.ratios()
    spec = case.spec
    return {
        "name": spec.name, "kind": spec.kind, "flush": spec.flush,
        "redis_appendfsync": REDIS_FSYNC[spec.flush], "per_request": spec.per_request,
        "window": spec.window, "count": count, "unit": unit(spec),
        "ours": side(case.ours), "redis": side(case.redis),
        "ratio_meaning": "ours throughput / Redis throughput, median over paired repetitions",
        "ratio_median": ratios.median, "ratio_samples": ratios.values,
    }


def target_results(cases: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    by_name = {c["name"]: c for c in cases}
    out: list[dict[str, Any]] = []
    for name, form, goal, text in TARGETS:
        case = by_name.get(name)
        if case is None:
            continue
        if form == "ratio":
            value = case["ratio_median"]
        elif form == "ratio-vs-batch":
            batch = by_name.get(name.replace("single", "batch"))
            if batch is None:
                continue
            value = case["ours"]["per_s"] / batch["redis"]["per_s"]
        else:
            value = case["ours"]["per_s"]
        out.append({"case": name, "description": text, "form": form, "target": goal,
                    "measured": value, "met": value >= goal})
    return out


def _fmt_target(value: float, form: str) -> str:
    return f"{value:.2f}x" if form.startswith("ratio") else f"{value:,.0f}"


def _target_cell(target: Mapping[str, Any], key: str) -> str:
    return _fmt_target(target[key], target["form"])


def results_table(cases: Sequence[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("case", "count", "ours /s", "Redis /s", "ours/Redis", "ratio range",
                "broker CPU us", "client CPU us (ours)", "Redis CPU us", "client CPU us (Redis)"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for c in cases:
        o, r = c["ours"], c["redis"]
        table.add_row(
            c["name"], f"{c['count']:,}", f"{o['per_s']:,.0f}", f"{r['per_s']:,.0f}",
            f"{c['ratio_median']:.2f}",
            f"{min(c['ratio_samples']):.2f}-{max(c['ratio_samples']):.2f}",
            f"{o['server_cpu_us_per_item']:.1f}", f"{o['client_cpu_us_per_item']:.1f}",
            f"{r['server_cpu_us_per_item']:.1f}", f"{r['client_cpu_us_per_item']:.1f}")
    return table


def targets_table(targets: Sequence[dict[str, Any]]) -> Table:
    return report.targets_table(targets, _target_cell)


def code_summary(code: dict[str, Any]) -> str:
    return report.code_summary(code, tuple(f"broker_lite/{part}" for part in MEASURED_PARTS))


def markdown_section(result: dict[str, Any]) -> str:
    params = result["parameters"]
    lines = [
        f"Last full run: {result['generated_at']}, {params['repeat']} repetitions (medians).",
        f"Code measured: {code_summary(result['code'])}.",
        f"Machine: {machine_summary(result['machine'])}; load average "
        f"{report.load_text(result['load_average'])}.",
        f"Redis {params['redis_version']}, redis-py {params['redis_py_version']} "
        f"({params['redis_py_parser']}). Bodies of {params['body_size']} B. CPU columns "
        "are CPU microseconds per message (per transaction for `tx-*`), all threads of the "
        "process, medians.",
        "",
        "| case | count | ours /s | Redis /s | ours/Redis | ratio range | broker CPU us "
        "| client CPU us | Redis CPU us | client CPU us (Redis) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["cases"]:
        o, r = c["ours"], c["redis"]
        lines.append(
            f"| {c['name']} | {c['count']:,} | {o['per_s']:,.0f} | {r['per_s']:,.0f} | "
            f"{c['ratio_median']:.2f} | {min(c['ratio_samples']):.2f}-"
            f"{max(c['ratio_samples']):.2f} | {o['server_cpu_us_per_item']:.1f} | "
            f"{o['client_cpu_us_per_item']:.1f} | {r['server_cpu_us_per_item']:.1f} | "
            f"{r['client_cpu_us_per_item']:.1f} |")
    lines += report.markdown_targets(result["targets"], _target_cell)
    return "\n".join(lines)
