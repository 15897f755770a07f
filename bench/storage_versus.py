"""``bench/storage.py --versus REV``: the same cases run by broker_lite as committed at REV.

A child process imports broker_lite from ``git archive REV`` (first on its
``PYTHONPATH``), builds its own messages and recovery log with that code, and
then runs one case's "ours" side per request, so that the parent can put
REV's runs between its own and the bound's, repetition by repetition. The
protocol is one JSON line each way over the child's stdin and stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from _common import REPO_ROOT, TMP_DIR, extract_commit

__all__ = ["VersusWorker", "serve"]


class VersusWorker:
    """The parent's handle on the child measuring broker_lite at one commit."""

    def __init__(self, rev: str, script: Path, args: list[str], src_env: str,
                 commit_env: str) -> None:
        self._dest = TMP_DIR / f"versus-{os.getpid()}"
        self.commit = extract_commit(rev, "broker_lite", self._dest)
        env = dict(os.environ, **{src_env: str(self._dest), commit_env: self.commit})
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self._dest), env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, str(script), "--versus-worker", *args], env=env, cwd=REPO_ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info: dict[str, Any] = self._reply()  # sent once the child's setup is done

    def _reply(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the --versus child exited ({self._proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"--versus child: {reply['error']}")
        return reply

    def run(self, case: str) -> tuple[float, dict[str, float]]:
        """Run ``case``'s measured side once in the child: ``(seconds, extra)``."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(case + "\n")
        self._proc.stdin.flush()
        reply = self._reply()
        return float(reply["seconds"]), {k: float(v) for k, v in reply["extra"].items()}

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=120)
        shutil.rmtree(self._dest, ignore_errors=True)


def serve(info: dict[str, Any], runs: dict[str, Any], out: IO[str]) -> None:
    """The child's loop: announce ``info``, then run each case named on stdin.

    ``runs`` maps a case name to a callable returning a measurement with
    ``seconds`` and ``extra``.
    """
    out.write(json.dumps(info) + "\n")
    out.flush()
    for line in sys.stdin:
        name = line.strip()
        try:
            m = runs[name]()
            reply: dict[str, Any] = {"seconds": m.seconds, "extra": m.extra}
        except Exception as exc:  # reported to the parent, which stops the run
            reply = {"error": f"{name}: {type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
