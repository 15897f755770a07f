"""Where the benchmarks live and write: bench/, the checkout's root, results and scratch.

:mod:`_common` re-exports these names.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BENCH_DIR", "REPO_ROOT", "RESULTS_DIR", "TMP_DIR"]

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
#: scratch space for data files; gitignored, on the same disk as the repository
TMP_DIR = RESULTS_DIR / "tmp"
