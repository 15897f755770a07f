"""The demo's processes: :class:`Part` (one subprocess) and the relay's :class:`Supervisor`.

Every part runs in its own process group, logs to a file, and is stopped
with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from outbox.errors import OutboxError

__all__ = ["REPO", "DemoError", "Part", "Supervisor", "poll"]

REPO = Path(__file__).resolve().parents[1]


class DemoError(OutboxError):
    """The demo could not run (a part did not start, or took too long)."""


@dataclass
class Part:
    """One subprocess of the demo, in its own process group, logging to a file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, cwd=REPO, stdout=log,
                                            stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float) -> re.Match[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        match: list[re.Match[str]] = []

        def seen() -> bool:
            found = regex.search(self.log())
            if found:
                match.append(found)
                return True
            if not self.alive():
                raise DemoError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return False

        poll(seen, timeout, f"{self.name} did not start:\n" + "{log}",
             lambda: self.log()[-3000:])
        return match[0]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL after ``timeout`` (and for any straggler)."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)


def poll(predicate: Callable[[], bool], timeout: float, message: str,
         detail: Callable[[], str] = lambda: "") -> None:
    """Wait for ``predicate`` (checked every 50 ms) or raise :class:`DemoError`."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise DemoError(message.replace("{log}", detail()))
        pause.wait(0.05)


@dataclass
class Supervisor:
    """Restarts the relay when it died, and measures how long it was down.

    A relay is down from the moment its death is seen until its successor
    logs Celery's ``ready.``; a successor killed before it was ready extends
    the same outage.
    """

    relay: Part
    down_since: float | None = None
    outages: list[float] = field(default_factory=list)
    #: when the first death was seen, and when the last successor was ready
    first_death: float | None = None
    last_ready: float | None = None

    _READY = re.compile(r"celery@\S+ ready\.")

    def check(self) -> None:
        now = time.monotonic()
        if self.down_since is not None and self.relay.alive() and \
                len(self._READY.findall(self.relay.log())) >= self.relay.starts:
            self.outages.append(now - self.down_since)
            self.down_since = None
            self.last_ready = now
        if not self.relay.alive():
            self.relay.stop(timeout=2)  # beat's child, if it outlived the worker
            self.relay.start()
            if self.down_since is None:
                self.down_since = now
            if self.first_death is None:
                self.first_death = now

    @property
    def kills(self) -> int:
        return self.relay.starts - 1

    def kill_period(self) -> float:
        """Seconds from the first death to the last successor's ``ready.`` (0: no kill).

        A transaction committed in this period may wait through every outage
        in it and the backlog between them: that, not the sum of the outages,
        is how late the kills can make it.
        """
        if self.first_death is None:
            return 0.0
        end = self.last_ready if self.down_since is None and self.last_ready else \
            time.monotonic()
        return end - self.first_death

    def downtime(self) -> float:
        """Seconds the relay was down in all (an outage still going counts until now)."""
        ongoing = time.monotonic() - self.down_since if self.down_since is not None else 0.0
        return sum(self.outages) + ongoing
