"""Run ``rocketbox`` as a real process: the installed console script, or ``python -m outbox``."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

ROCKETBOX = Path(sys.executable).parent / "rocketbox"


def run_rocketbox(args: Sequence[str], *, module: bool = False, timeout: float = 60,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "outbox"] if module else [str(ROCKETBOX)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETBOX_")}
    environment.update(env or {})
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout,
                          env=environment, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def rocketbox_process(args: Sequence[str], *, stdout: int = subprocess.PIPE
                      ) -> Iterator[subprocess.Popen[str]]:
    """``rocketbox ARGS`` started with its stderr (and ``stdout``) piped; killed on the way
    out if it still runs."""
    proc = subprocess.Popen([str(ROCKETBOX), *args], stdout=stdout, stderr=subprocess.PIPE,
                            text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def terminate(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    """SIGTERM, then the exit status (a clean stop is 0)."""
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout)


class LineCollector:
    """Collects a pipe's lines on a thread, so a test can wait for one without blocking."""

    def __init__(self, pipe: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, args=(pipe,), daemon=True)
        self._thread.start()

    def _pump(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._queue.put(line.rstrip("\n"))

    def text(self) -> str:
        """Every line so far."""
        while not self._queue.empty():
            self.lines.append(self._queue.get_nowait())
        return "\n".join(self.lines)

    def find(self, needle: str) -> str | None:
        """The first line so far that contains ``needle`` (for ``wait_until``)."""
        self.text()
        return next((line for line in self.lines if needle in line), None)
