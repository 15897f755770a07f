"""The last consistency audit, as ``rocketbox audit --json/--html/--out`` left it.

The JSON summary has the counts per category and the latency; the divergent
transactions themselves are in the Parquet directory of ``--out`` (read with
pyarrow, which the ``spark`` extra installs). Each is linked to its trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["AuditReport", "read_audit"]

_MAX_ROWS = 500


@dataclass(slots=True)
class AuditReport:
    json_path: Path | None = None
    written_at: datetime | None = None
    counts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    divergent: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_audit(json_path: Path | None, out_dir: Path | None) -> AuditReport:
    report = AuditReport(json_path=json_path)
    if json_path is None:
        report.problems.append("no audit report configured: start the console with "
                               "--audit-json FILE (what `rocketbox audit --json FILE` wrote)")
    elif not json_path.is_file():
        report.problems.append(f"{json_path} does not exist yet: run `rocketbox audit "
                               f"--json {json_path}`")
    else:
        try:
            data = json.loads(json_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            report.problems.append(f"{json_path} is not an audit JSON report: {exc}")
        else:
            report.written_at = datetime.fromtimestamp(json_path.stat().st_mtime, UTC)
            report.counts = {str(k): int(v) for k, v in dict(data.get("counts", {})).items()}
            report.summary = data
    if out_dir is not None:
        report.divergent = _divergent(out_dir, report.problems)
    return report


def _divergent(out_dir: Path, problems: list[str]) -> list[dict[str, Any]]:
    if not out_dir.is_dir():
        problems.append(f"{out_dir} (the audit's --out) does not exist")
        return []
    try:
        import pyarrow.parquet as pq
    except ImportError:
        problems.append("reading the divergent rows needs pyarrow: pip install "
                        "'rocketbox[spark]'")
        return []
    try:
        table = pq.read_table(out_dir, columns=["tx_id", "reason", "detail", "topic"])
    except Exception as exc:
        problems.append(f"{out_dir}: not the audit's Parquet output: {exc}")
        return []
    rows: list[dict[str, Any]] = table.slice(0, _MAX_ROWS).to_pylist()
    return rows
