"""One child process in its own session: start it, wait until it is ready, stop its group.

:class:`Process` is the one supervisor the demo, the tests' server fixtures
and the benchmarks share. It

- spawns ``argv`` with ``start_new_session=True``, so the child leads its own
  process group and everything it forks can be signalled at once;
- appends the child's output to a log file (stdout and stderr together, or
  stderr to a file of its own), which :meth:`Process.output` reads back;
- waits, with a deadline, for a line in that output (:meth:`Process.wait_for`)
  or for any condition (:meth:`Process.wait_until`), and gives up at once when
  the child exits instead;
- stops the group with a polite signal (SIGTERM by default), then SIGKILL after
  a deadline and for any straggler, and returns the leader's exit status;
- can be started again once it ended (:attr:`Process.starts` counts the starts).

Errors::

    ProcessError              the child did not become ready; carries name and log tail
     ├── NotReady             the deadline passed first (field: timeout)
     └── ExitedEarly          the child ended first (field: returncode)

The process-group signals are ``os.killpg``; a group that is already gone is
not an error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

__all__ = ["ExitedEarly", "NotReady", "Process", "ProcessError", "signal_group"]

T = TypeVar("T")

#: seconds a stopped group gets after the polite signal before SIGKILL
STOP_TIMEOUT = 15.0
#: characters of the log an error message carries
TAIL_CHARS = 4000


class ProcessError(Exception):
    """The child did not become ready; ``tail`` is the end of its log."""

    def __init__(self, name: str, problem: str, tail: str) -> None:
        super().__init__(f"{name} {problem}; its log ends:\n{tail}")
        self.name = name
        self.tail = tail


class NotReady(ProcessError):
    """The deadline passed before the child was ready."""

    def __init__(self, name: str, timeout: float, what: str, tail: str) -> None:
        super().__init__(name, f"was not ready ({what}) within {timeout:g}s", tail)
        self.timeout = timeout


class ExitedEarly(ProcessError):
    """The child ended while we waited for it to be ready."""

    def __init__(self, name: str, returncode: int, tail: str) -> None:
        super().__init__(name, f"exited with {returncode} before it was ready", tail)
        self.returncode = returncode


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pid`` leads; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class Process:
    """``argv`` in its own session, its output appended to ``log`` (see the module doc).

    ``stderr`` sends the child's stderr to a file of its own (else it joins
    ``log``); ``stdin=subprocess.PIPE`` gives ``popen.stdin`` to write to. ``env``
    replaces the environment when given; ``cwd`` is the working directory. Use it as
    a context manager to stop the group on exit.
    """

    def __init__(self, argv: Sequence[str | os.PathLike[str]], *, log: Path,
                 stderr: Path | None = None, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, name: str | None = None,
                 stdin: int = subprocess.DEVNULL) -> None:
        self.argv = [os.fspath(a) for a in argv]
        self.log_path = log
        self.stderr_path = stderr
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.name = name or Path(self.argv[0]).name
        self.stdin = stdin
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- running ----------------------------------------------------------------------

    def start(self) -> Process:
        """Spawn the child (again, when an earlier one ended); returns ``self``."""
        if self.alive():
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        with contextlib.ExitStack() as files:
            out = files.enter_context(self.log_path.open("ab"))
            err = files.enter_context(self.stderr_path.open("ab")) \
                if self.stderr_path is not None else subprocess.STDOUT
            self.popen = subprocess.Popen(self.argv, stdin=self.stdin, stdout=out,
                                          stderr=err, env=self.env, cwd=self.cwd,
                                          start_new_session=True)
        self.starts += 1
        return self

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit status once the child ended, else None (also before the start)."""
        return None if self.popen is None else self.popen.poll()

    @property
    def returncode(self) -> int | None:
        """The exit status once the child ended and was waited for (see :meth:`poll`)."""
        return None if self.popen is None else self.popen.returncode

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to end on its own; ``subprocess.TimeoutExpired`` after ``timeout``."""
        if self.popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self.popen.wait(timeout)

    # -- output -----------------------------------------------------------------------

    def output(self) -> str:
        """Everything in the log so far (every start's output, appended)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def errors(self) -> str:
        """The separate stderr file's text (the log's when stderr joins it)."""
        if self.stderr_path is None:
            return self.output()
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, chars: int = TAIL_CHARS) -> str:
        text = self.output()[-chars:]
        if self.stderr_path is not None:
            text += f"\n--- stderr ---\n{self.errors()[-chars:]}"
        return text

    # -- readiness --------------------------------------------------------------------

    def wait_until(self, ready: Callable[[], T | None], timeout: float, *,
                   what: str = "condition", interval: float = 0.05,
                   ignore: tuple[type[BaseException], ...] = ()) -> T:
        """Poll ``ready()`` until it returns a truthy value and return it.

        An exception in ``ignore`` counts as "not yet" (a refused connection).

        Raises:
            ExitedEarly: the child ended first.
            NotReady: ``timeout`` seconds passed first.
        """
        deadline = time.monotonic() + timeout
        pause = threading.Event()
        while True:
            code = self.poll()
            if code is not None:
                raise ExitedEarly(self.name, code, self.tail())
            with contextlib.suppress(*ignore):
                result = ready()
                if result:
                    return result
            left = deadline - time.monotonic()
            if left <= 0:
                raise NotReady(self.name, timeout, what, self.tail())
            pause.wait(min(interval, left))

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float,
                 interval: float = 0.05) -> re.Match[str]:
        """Wait until the log has a match of ``pattern`` (``re.search``); returns the match."""
        regex = re.compile(pattern, re.MULTILINE) if isinstance(pattern, str) else pattern
        return self.wait_until(lambda: regex.search(self.output()), timeout,
                               what=f"no line matching {regex.pattern!r}", interval=interval)

    # -- stopping ---------------------------------------------------------------------

    def send_signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the whole group (nothing when it never started)."""
        if self.popen is not None:
            signal_group(self.popen.pid, sig)

    def stop(self, sig: signal.Signals | None = signal.SIGTERM,
             timeout: float = STOP_TIMEOUT) -> int | None:
        """``sig`` to the group, up to ``timeout`` s for the leader, then SIGKILL the group.

        ``sig=None`` sends nothing first (the caller asked the child to stop in
        some other way). Returns the leader's exit status (negative: the signal
        that ended it), or None when it was never started. Safe to call twice.
        """
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            if sig is not None:
                self.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        signal_group(self.popen.pid, signal.SIGKILL)  # the leader, or a straggler it left
        return self.popen.wait(timeout)

    def kill(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGKILL the group at once, as a power cut would."""
        return self.stop(signal.SIGKILL, timeout)

    def __enter__(self) -> Process:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
