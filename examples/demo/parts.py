"""What the demo keeps running: the relay's :class:`RelaySupervisor`, and its waits.

Each part is a :class:`procgroup.Process` (its own process group, a log file,
SIGTERM then SIGKILL); this module adds what only the demo needs: restarting
the relay its crash hook kills, and measuring how long it was down.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from procgroup import Process

__all__ = ["REPO", "DemoError", "RelaySupervisor", "poll"]

REPO = Path(__file__).resolve().parents[2]


class DemoError(Exception):
    """The demo could not run (a part did not start, or took too long)."""


def poll(predicate: Callable[[], bool], timeout: float, message: str) -> None:
    """Wait for ``predicate`` (checked every 50 ms) or raise :class:`DemoError`."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise DemoError(message)
        pause.wait(0.05)


@dataclass
class RelaySupervisor:
    """Restarts the relay when it died, and measures how long it was down.

    A relay is down from the moment its death is seen until its successor
    logs Celery's ``ready.``; a successor killed before it was ready extends
    the same outage.
    """

    relay: Process
    down_since: float | None = None
    outages: list[float] = field(default_factory=list)
    #: when the first death was seen, and when the last successor was ready
    first_death: float | None = None
    last_ready: float | None = None

    _READY = re.compile(r"celery@\S+ ready\.")

    def check(self) -> None:
        now = time.monotonic()
        if self.down_since is not None and self.relay.alive() and \
                len(self._READY.findall(self.relay.output())) >= self.relay.starts:
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
