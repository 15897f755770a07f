"""Helpers shared by the benchmarks in ``bench/``.

Every benchmark runs our code and a baseline side by side in one process,
interleaved, several times, and reports medians and the median of the paired
ratios. This module holds what they all need: a description of the machine
and of the code measured (commit, uncommitted paths, a source digest, or a
commit extracted to run against), a few statistics, the JSON result file and
the generated section of ``bench/README.md``. The machine's description is
:mod:`_machine`, which code is measured :mod:`_measured_code`, and the paths
:mod:`_bench_paths`; every name stays importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import gc
import json
import os
import shutil
import signal
import statistics
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench_paths import BENCH_DIR, REPO_ROOT, RESULTS_DIR, TMP_DIR
from _machine import describe_machine, filesystem_of, load_average, machine_summary
from _measured_code import (
    COMMIT_ENV,
    SRC_ENV,
    code_state,
    extract_commit,
    git_state,
    run_at_commit,
    source_digest,
)

__all__ = [
    "BENCH_DIR",
    "COMMIT_ENV",
    "JSON_OUT_ENV",
    "MB",
    "REPO_ROOT",
    "RESULTS_DIR",
    "SRC_ENV",
    "TMP_DIR",
    "Samples",
    "add_repository_paths",
    "auto_create_topics",
    "benchmark_main",
    "code_state",
    "describe_machine",
    "exit_on_sigterm",
    "extract_commit",
    "filesystem_of",
    "git_state",
    "load_average",
    "machine_summary",
    "median",
    "render_saved",
    "run_at_commit",
    "save_result",
    "scratch_dir",
    "settle",
    "source_digest",
    "update_readme_section",
    "utc_now",
    "windowed",
    "write_json",
]

#: benchmarks report decimal megabytes (10**6 bytes)
MB = 1_000_000
#: when set, :func:`benchmark_main` also writes the result there (even a quick run):
#: how ``bench/versus_commit.py`` collects the runs it pairs
JSON_OUT_ENV = "ROCKETBOX_BENCH_JSON_OUT"


def add_repository_paths() -> None:
    """Let a script in bench/ import the repository's packages, the test helpers among them.

    The helpers are the package ``tests.support`` under the checkout's root (no
    ``tests/`` on ``sys.path``). bench/ is ``sys.path[0]`` when a script runs; the
    root goes after it, so an installed copy or ``PYTHONPATH`` (e.g.
    ``--at-commit``) still comes first.
    """
    if str(REPO_ROOT) not in sys.path:
        sys.path.append(str(REPO_ROOT))


def auto_create_topics(source: Path | None = None) -> list[str]:
    """``["--auto-create-topics"]`` if the broker_lite measured has the flag, else ``[]``.

    Topic auto-create became opt-in for ``broker-lite serve``; a commit from
    before that (``--at-commit``) auto-creates without the flag, and refuses it.
    ``source`` is the directory holding the ``broker_lite`` package measured.
    """
    if source is None:
        import importlib.util

        spec = importlib.util.find_spec("broker_lite")
        if spec is None or spec.origin is None:
            return []
        source = Path(spec.origin).parent.parent
    serve = source / "broker_lite" / "cli" / "serve.py"
    return ["--auto-create-topics"] if "--auto-create-topics" in serve.read_text() else []


# -- statistics ----------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (which must not be empty)."""
    if not values:
        raise ValueError("median of no samples")
    return float(statistics.median(values))


@dataclass(slots=True)
class Samples:
    """Repeated measurements of one quantity, kept in the order they were taken."""

    values: list[float]

    @property
    def median(self) -> float:
        return median(self.values)

    @property
    def spread(self) -> float:
        """(max - min) / median: a rough noise figure for the samples."""
        mid = self.median
        return (max(self.values) - min(self.values)) / mid if mid else 0.0


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


# -- running -------------------------------------------------------------------------


def settle() -> None:
    """Start a measurement from a quiet state: no dirty pages, no pending garbage.

    ``os.sync`` writes back what earlier runs left in the page cache, so their
    writeback does not land inside the next timed run.
    """
    os.sync()
    gc.collect()


# -- output -------------------------------------------------------------------------


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON, atomically (write then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def save_result(name: str, result: dict[str, Any], section: str) -> Path:
    """Write ``result`` to ``results/NAME.json`` and ``section`` between the ``NAME``
    markers of bench/README.md; returns the JSON file's path."""
    path = RESULTS_DIR / f"{name}.json"
    write_json(path, result)
    update_readme_section(BENCH_DIR / "README.md", name, section)
    return path


def render_saved(name: str, markdown: Callable[[dict[str, Any]], str]) -> None:
    """``--render``: rewrite the ``NAME`` section of bench/README.md from ``results/NAME.json``."""
    saved = json.loads((RESULTS_DIR / f"{name}.json").read_text(encoding="utf-8"))
    update_readme_section(BENCH_DIR / "README.md", name, markdown(saved))


def update_readme_section(readme: Path, name: str, content: str) -> None:
    """Replace what lies between ``<!-- name:begin -->`` and ``<!-- name:end -->``.

    The markers must already be in the file (the surrounding prose is written
    by hand); raises :class:`ValueError` when they are missing or out of order.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = readme.read_text(encoding="utf-8")
    start = text.find(begin)
    stop = text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{readme}: markers {begin} ... {end} not found")
    head = text[: start + len(begin)]
    tail = text[stop:]
    readme.write_text(f"{head}\n{content.strip()}\n{tail}", encoding="utf-8")


@contextlib.contextmanager
def scratch_dir(name: str, *, keep: bool = False) -> Iterator[Path]:
    """A directory ``bench/results/tmp/NAME-PID`` (data files, logs), removed afterwards
    unless ``keep``."""
    root = TMP_DIR / f"{name}-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    try:
        yield root
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
            with contextlib.suppress(OSError):
                TMP_DIR.rmdir()


async def windowed(requests: int, window: int,
                   one: Callable[[int], Awaitable[object]]) -> None:
    """Make ``requests`` calls ``one(i)``, ``i`` = 0, 1, ..., keeping ``window`` in flight.

    The same driver serves both systems: ``window`` workers each start the
    next request as soon as their previous one is answered.
    """
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < requests:
            index = next_index
            next_index += 1
            await one(index)

    await asyncio.gather(*(worker() for _ in range(min(window, requests))))


def exit_on_sigterm() -> None:
    """Make a SIGTERM end the run as Ctrl-C does. Every ``with`` block then unwinds,
    so the servers and workers the run started are stopped. Without this they outlive
    a run that was sent SIGTERM."""

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)


def benchmark_main(script: str | Path, name: str, argv: Sequence[str],
                   parse_args: Callable[[Sequence[str]], Any],
                   measure: Callable[[Any], dict[str, Any]],
                   markdown_section: Callable[[dict[str, Any]], str]) -> int:
    """The usual ``main`` of a benchmark: ``--render``, ``--at-commit``, measure, save.

    ``--render`` rewrites the ``name`` section of bench/README.md from
    ``results/NAME.json``; ``--at-commit REV`` re-runs ``script`` on that commit;
    otherwise it measures and, unless ``--quick`` or ``--cases``, writes the JSON
    and the README section.
    """
    args = parse_args(argv)
    exit_on_sigterm()
    if args.render:
        render_saved(name, markdown_section)
        return 0
    if args.at_commit and SRC_ENV not in os.environ:
        return run_at_commit(script, args.at_commit, argv)
    result = measure(args)
    json_out = os.environ.get(JSON_OUT_ENV)
    if json_out:
        write_json(Path(json_out), result)
    if args.quick or args.cases:
        print("quick or partial run: results not saved", flush=True)
        return 0
    result_file = save_result(name, result, markdown_section(result))
    print(f"wrote {result_file} and the {name} section of {BENCH_DIR / 'README.md'}", flush=True)
    return 0
