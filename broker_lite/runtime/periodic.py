"""The broker's periodic work, each job in a worker thread so the event loop never blocks.

The core exposes its timed services as plain methods (``deliver_due``,
``check_transactions``, ``expire_clients``, ``persist``); :func:`schedule_for`
says how often each runs and :class:`Periodic` runs one of them. A failing
round is logged (with its traceback the first time, then every
``_LOG_EVERY`` failures in a row) and never stops the job.

Stopping never cancels a round in its thread: :meth:`Periodic.stop` lets the
current round finish, so ``broker.close()`` never runs under a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from broker_lite.errors import ConfigurationError

if TYPE_CHECKING:
    from broker_lite.core import Broker

__all__ = ["Periodic", "schedule_for"]

log = logging.getLogger("broker_lite.server")

_LOG_EVERY = 100


def schedule_for(broker: Broker) -> list[tuple[str, Callable[[], object], float]]:
    """``(name, method, interval seconds)`` for each periodic job of ``broker``.

    Delayed and retry messages are due with a resolution of a tenth of the
    shortest delay level (1 s, times ``delay_time_scale``), at most 100 ms.
    """
    config = broker.config
    return [
        ("deliver_due", broker.deliver_due, min(0.1, max(0.005, config.delay_time_scale / 10))),
        # Every half has its own check schedule in the core; running the service
        # at a quarter of the interval (at most 1 s) keeps each check within
        # that much of when it is due, so DESIGN §1.3's bound holds.
        ("check_transactions", broker.check_transactions,
         min(1.0, config.tx_check_interval / 4)),
        ("expire_clients", broker.expire_clients, min(5.0, max(0.05, config.client_expiry / 2))),
        ("persist", broker.persist, 1.0),
    ]


class Periodic:
    """Runs ``job`` in a worker thread every ``interval`` seconds until stopped."""

    def __init__(self, name: str, job: Callable[[], object], interval: float) -> None:
        if interval <= 0:
            raise ConfigurationError(f"{name}: interval must be positive, got {interval}",
                                     setting="interval")
        self.name = name
        self.interval = interval
        self.rounds = 0
        self.failures = 0
        self._job = job
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError(f"periodic job {self.name} is already started")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Let the current round finish, then end."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def _run(self) -> None:
        in_a_row = 0
        while not self._stop.is_set():
            try:
                result = await asyncio.to_thread(self._job)
            except Exception as exc:
                self.failures += 1
                in_a_row += 1
                if in_a_row == 1 or in_a_row % _LOG_EVERY == 0:
                    log.error("periodic %s failed (%d in a row): %s", self.name, in_a_row, exc,
                              exc_info=in_a_row == 1)
            else:
                if in_a_row:
                    log.info("periodic %s works again after %d failures", self.name, in_a_row)
                in_a_row = 0
                if isinstance(result, int) and result:
                    log.debug("periodic %s: %d", self.name, result)
            self.rounds += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
