"""Helpers shared by the benchmarks in ``bench/``.

Every benchmark runs our code and a baseline side by side in one process,
interleaved, several times, and reports medians and the median of the paired
ratios. This module holds what they all need: a description of the machine
and of the code measured (commit, uncommitted paths, a source digest, or a
commit extracted to run against), a few statistics, the JSON result file and
the generated section of ``bench/README.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import gc
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
#: scratch space for data files; gitignored, on the same disk as the repository
TMP_DIR = RESULTS_DIR / "tmp"
#: benchmarks report decimal megabytes (10**6 bytes)
MB = 1_000_000
#: set by :func:`run_at_commit` in the child: where the measured commit was extracted to,
#: and which commit it is
SRC_ENV = "ROCKETBOX_BENCH_SRC"
COMMIT_ENV = "ROCKETBOX_BENCH_COMMIT"
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


# -- machine description ---------------------------------------------------------


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def filesystem_of(path: Path) -> dict[str, str]:
    """Mount point, filesystem type, device and options of the mount holding ``path``.

    Reads ``/proc/self/mountinfo`` and picks the longest mount point that is a
    prefix of the resolved path. Empty values when that file is unreadable.
    """
    target = path.resolve()
    best: dict[str, str] = {"mount_point": "", "fstype": "", "device": "", "options": ""}
    best_len = -1
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return best
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        mount_point = fields[4].encode().decode("unicode_escape")
        if not target.is_relative_to(mount_point) or len(mount_point) <= best_len:
            continue
        fstype, device, *rest = right.split()
        best = {
            "mount_point": mount_point,
            "fstype": fstype,
            "device": device,
            "options": fields[5] + ("," + rest[0] if rest else ""),
        }
        best_len = len(mount_point)
    return best


def describe_machine(data_dir: Path) -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPU, cores, memory, disk, Python."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "memory_bytes": _memory_bytes(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "data_dir": str(data_dir),
        "data_dir_filesystem": filesystem_of(data_dir),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: other work on the machine skews the numbers."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine_summary(machine: dict[str, Any]) -> str:
    """One line naming the machine, for tables and the README."""
    mem = machine.get("memory_bytes")
    mem_text = f"{mem / 2**30:.0f} GiB RAM" if mem else "unknown RAM"
    fs = machine.get("data_dir_filesystem", {})
    return (
        f"{machine['cpu_model']}, {machine['cpus_usable']} usable cores, {mem_text}, "
        f"data on {fs.get('fstype') or '?'} ({fs.get('device') or '?'}), "
        f"Linux {machine['kernel']}, {machine['python_implementation']} {machine['python']}"
    )


def git_state() -> dict[str, Any]:
    """The commit measured and whether the working tree had local changes."""

    def run(*args: str) -> str:
        try:
            done = subprocess.run(
                ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout

    # porcelain lines are "XY path": two status letters, a space, the path
    return {
        "commit": run("rev-parse", "HEAD").strip() or None,
        "dirty_paths": [line[3:] for line in run("status", "--porcelain").splitlines()],
    }


def extract_commit(rev: str, subdir: str, dest: Path) -> str:
    """Write ``subdir`` as committed at ``rev`` under ``dest``; return the full commit id.

    Lets a benchmark measure committed code while the working tree is being
    edited: put ``dest`` first on ``PYTHONPATH`` in a child process.
    """
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, subdir],
        cwd=REPO_ROOT, capture_output=True, check=True,
    ).stdout
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return commit


def source_digest(directory: Path, pattern: str = "*.py") -> str:
    """SHA-256 over the names and contents of the files matching ``pattern``.

    Taken before and after a run, it shows whether the code measured changed
    on disk meanwhile, and identifies uncommitted code in the results.
    """
    digest = hashlib.sha256()
    for path in sorted(directory.rglob(pattern)):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


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


# -- which code is measured ------------------------------------------------------------


def code_state(imported_from: Path, digests: Mapping[str, str] | None = None
               ) -> dict[str, Any]:
    """Which code is measured: a commit extracted by :func:`run_at_commit`, or the working tree.

    ``imported_from`` is the measured package's directory as actually imported;
    under ``--at-commit`` it must lie in the extracted copy (else the run would
    measure the wrong code, and this raises). ``digests`` (e.g. a source digest
    of the measured files) go into the result as they are.
    """
    extra = dict(digests or {})
    src = os.environ.get(SRC_ENV)
    if src:
        if not imported_from.is_relative_to(Path(src).resolve()):
            raise RuntimeError(f"measured code imported from {imported_from}, not from {src}")
        return {"source": "commit", "commit": os.environ.get(COMMIT_ENV), "dirty_paths": [],
                **extra}
    return {"source": "working tree", **git_state(), **extra}


def run_at_commit(script: str | Path, rev: str, argv: Sequence[str],
                  package: str = "broker_lite") -> int:
    """Re-run ``script`` with ``argv`` in a child that imports ``package`` as committed at
    ``rev`` (extracted under :data:`TMP_DIR`, first on ``PYTHONPATH``); its exit status."""
    dest = TMP_DIR / f"src-{Path(script).stem}-{os.getpid()}"
    try:
        commit = extract_commit(rev, package, dest)
        print(f"measuring {package} at commit {commit[:12]} (extracted to {dest})", flush=True)
        env = dict(os.environ, **{SRC_ENV: str(dest), COMMIT_ENV: commit})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(dest), env.get("PYTHONPATH")) if p)
        return subprocess.run([sys.executable, str(script), *argv], env=env, cwd=REPO_ROOT,
                              check=False).returncode
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        with contextlib.suppress(OSError):
            TMP_DIR.rmdir()


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
