"""A worker bootstep that runs the check-back responder inside the Celery worker.

``make_celery(..., settings=CelerySettings(checker=True))`` adds
:class:`CheckbackStep` to the worker's blueprint. It runs
:func:`outbox.checker.run_checker` on a thread of the worker's main process
(never in a pool child), so one worker is both relay and responder: the
broker's check-backs for the outbox's producer group reach it. A broker that
is down at start-up is retried in the background; the worker starts anyway.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import bootsteps

from outbox.celery.app import rocketbox_state
from outbox.checker import run_checker

__all__ = ["CheckbackStep"]

log = logging.getLogger("rocketbox.celery")


class CheckbackStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Start the responder with the worker, stop it with the worker."""

    label = "rocketbox check-back"
    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, worker: Any) -> None:
        outbox = rocketbox_state(worker.app).outbox
        self._stop.clear()
        self._thread = threading.Thread(
            target=run_checker, args=(outbox,), kwargs={"stop": self._stop},
            name="rocketbox-checker", daemon=True)
        self._thread.start()
        log.info("check-back responder for group %s starting in the worker",
                 outbox.producer_group)

    def stop(self, worker: Any) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=15)

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
