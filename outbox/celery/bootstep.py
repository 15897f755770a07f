"""Worker bootsteps: the check-back responder, and the worker's supervision.

``make_celery(..., settings=CelerySettings(checker=True))`` adds
:class:`CheckbackStep` to the worker's blueprint. It runs
:func:`outbox.checkback_runner.run_checker` on a thread of the worker's main process
(never in a pool child), so one worker is both relay and responder: the
broker's check-backs for the outbox's producer group reach it. A broker that
is down at start-up is retried in the background; the worker starts anyway.
A responder that dies (or stops while the worker runs) is a fatal error: the
worker stops and exits with status 1
(:meth:`~outbox.celery.state.RocketboxState.report_fatal`).

:class:`SuperviseStep` (always added) records the running worker in the
app's :class:`~outbox.celery.state.RocketboxState`, so that
:func:`~outbox.celery.worker.run_worker` can return the worker's own exit
status (Celery's ``worker_main`` drops it: a worker stopped by an
``Unrecoverable error`` used to exit with 0).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import bootsteps

from outbox.celery.state import RocketboxState, rocketbox_state
from outbox.checkback_runner import run_checker

__all__ = ["CheckbackStep", "SuperviseStep"]

log = logging.getLogger("rocketbox.celery")


class SuperviseStep(bootsteps.Step):  # type: ignore[misc]
    """Remember the worker in the app's state (for its exit status)."""

    label = "rocketbox supervision"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        rocketbox_state(worker.app).worker = worker


class CheckbackStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Start the responder with the worker, stop it with the worker."""

    label = "rocketbox check-back"
    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, worker: Any) -> None:
        state = rocketbox_state(worker.app)
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(state,),
                                        name="rocketbox-checker", daemon=True)
        self._thread.start()
        log.info("check-back responder for group %s starting in the worker",
                 state.outbox.producer_group)

    def _run(self, state: RocketboxState) -> None:
        try:
            run_checker(state.outbox, stop=self._stop)
        except Exception as exc:
            log.exception("the check-back responder failed")
            state.report_fatal(f"the check-back responder died: {exc!r}")
            return
        if not self._stop.is_set():
            state.report_fatal("the check-back responder stopped by itself")

    def stop(self, worker: Any) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=15)

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
