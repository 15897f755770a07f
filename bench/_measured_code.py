"""Which code a benchmark measures: the working tree, or a commit extracted to run.

:func:`git_state` (the commit, uncommitted paths) and :func:`source_digest`
describe the working tree; :func:`run_at_commit` re-runs a script in a child
that imports a package as committed at a revision (:func:`extract_commit`),
telling it so through :data:`SRC_ENV` and :data:`COMMIT_ENV`, and
:func:`code_state` says which of the two a result measured. :mod:`_common`
re-exports these names.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from _bench_paths import REPO_ROOT, TMP_DIR

__all__ = ["COMMIT_ENV", "SRC_ENV", "code_state", "extract_commit", "git_state",
           "run_at_commit", "source_digest"]

#: set by :func:`run_at_commit` in the child: where the measured commit was extracted to,
#: and which commit it is
SRC_ENV = "ROCKETBOX_BENCH_SRC"
COMMIT_ENV = "ROCKETBOX_BENCH_COMMIT"


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
