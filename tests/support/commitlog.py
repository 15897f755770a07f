"""A broker_lite data directory read the way an operator would: ``broker-lite inspect``."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any


def broker_records(data_dir: Path, *, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every commit-log record (``broker-lite inspect``), half and op records included."""
    out = subprocess.run([sys.executable, "-m", "broker_lite", "inspect", "--data-dir",
                          str(data_dir)], capture_output=True, text=True, timeout=timeout,
                         check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def commit_counts(records: list[dict[str, Any]]) -> collections.Counter[str]:
    """How many commit records each transaction id has in the broker."""
    return collections.Counter(r["transaction_id"] for r in records if r["sysflag"] == "commit")
