"""One bash process that runs a page's commands verbatim, one after another.

Each command's text goes to the shell unchanged, wrapped as

    { TEXT
    } </dev/null >OUT 2>&1 [&]

so ``cd``, ``export``, ``. .venv/bin/activate`` and the page's own ``&`` jobs
(``kill %1``) act on the shell as they would in a terminal. After each one the
shell writes ``$?``, ``$!`` and ``pwd`` to a small file the test waits for
(with a deadline). A long-running command the page runs in a terminal of its
own is started with a trailing ``&`` instead, its output in a log of its own:
the one change the test makes to a command, standing for "another terminal".

The shell leads its own process group (``procgroup.Process``), so stopping
the session stops every job it started, whatever the page left running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from procgroup import Process
from tests.support import wait_until

__all__ = ["Finished", "ShellSession"]


@dataclasses.dataclass(frozen=True)
class Finished:
    """What one command left: its exit status, the newest job's pid, the shell's cwd."""

    status: int
    job_pid: int | None
    cwd: Path
    output: str


class ShellSession:
    """A bash process fed one command at a time (see the module doc)."""

    def __init__(self, work: Path, cwd: Path, env: Mapping[str, str]) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.steps = 0
        self.shell = Process(["bash", "--noprofile", "--norc"], log=work / "bash.log",
                             env=env, cwd=cwd, name="bash", stdin=subprocess.PIPE)

    def __enter__(self) -> ShellSession:
        self.shell.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the shell and every job it started (SIGTERM, then SIGKILL)."""
        popen = self.shell.popen
        if popen is not None and popen.stdin is not None and not popen.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                popen.stdin.close()
        self.shell.stop(timeout=20)

    def _send(self, script: str) -> None:
        popen = self.shell.popen
        assert popen is not None and popen.stdin is not None
        popen.stdin.write(script.encode())
        popen.stdin.flush()

    def run(self, text: str, *, timeout: float, background: bool = False) -> Finished:
        """Run ``text`` (in the background with its own log when ``background``)."""
        self.steps += 1
        out = self.work / f"step-{self.steps}.out"
        done = self.work / f"step-{self.steps}.done"
        tail = " &" if background else ""
        self._send(f"{{ {text}\n}} </dev/null >{_quote(out)} 2>&1{tail}\n"
                   f"printf '%s %s\\n' \"$?\" \"$!\" >{_quote(done)}.tmp; "
                   f"pwd >>{_quote(done)}.tmp; mv {_quote(done)}.tmp {_quote(done)}\n")

        def finished() -> bool:
            if self.shell.poll() is not None:
                raise AssertionError(f"the shell ended (status {self.shell.poll()}) during "
                                     f"{text!r}; its log: {self.shell.tail()}")
            return done.exists()

        wait_until(finished, timeout=timeout, interval=0.05,
                   message=lambda: f"{text!r} did not finish within {timeout:g}s; its output:\n"
                                   f"{_read(out)[-3000:]}")
        first, cwd = done.read_text().splitlines()[:2]
        status, _, pid = first.partition(" ")
        return Finished(int(status), int(pid) if pid.strip() else None, Path(cwd), _read(out))

    def output_of(self, step: int) -> str:
        return _read(self.work / f"step-{step}.out")


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs (and is no zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _quote(path: Path) -> str:
    return "'" + os.fspath(path).replace("'", "'\\''") + "'"
