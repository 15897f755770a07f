"""The sweeper lane: a thread in every worker that relays what the tasks missed.

The fast path is the wake-up listener (on PostgreSQL by default,
:mod:`outbox.celery.listen`) or the relay tasks: one per commit (or per
``enqueue_window``), through the Celery broker. Everything that can go wrong
there leaves rows behind: a notification nobody heard, Redis down at commit,
a task lost with Redis or with its worker, a task that ran out of retries, a
queue so far behind that its tasks come late. The sweeper is the safety net, so it must not depend
on any of that: :class:`SweeperStep` runs :class:`Sweeper` on a thread of
the worker's main process, which claims due rows straight from the database
(``FOR UPDATE SKIP LOCKED`` and a lease, like every relay) every
``CelerySettings.sweep_interval`` seconds. No queue backlog, no Redis
outage and no beat process stand in its way, and every worker runs one
(claims never overlap, so more workers only sweep more often).

What a sweep does (:meth:`Sweeper.sweep`): a drain
(:meth:`~outbox.relay.Relay.drain`, ``RelaySettings.drain_lanes`` passes at
once) over rows committed at least ``sweep_min_age`` seconds ago (younger
ones are their tasks'), at most ``sweep_passes`` passes; a sweep that
relayed rows is followed at once by another, so a backlog is drained at full
speed rather than one batch a tick. A transient failure (the broker or the
database unreachable) is logged, naming which of the two, and the next tick
tries again; and when the relay's broker connection comes back, the sweeper
does not wait for the tick (:meth:`Sweeper.wake`). Anything else, missing
outbox tables included (:mod:`outbox.celery.faults`), is a fatal error: the
worker stops and exits with status 1.

So once the relay can reach the broker and the database again, a row whose
task was lost is relayed within about ``sweep_interval + sweep_min_age``
seconds, plus the time to drain the rows before it.

A relay killed mid-pass leaves its rows claimed until their lease runs out
(``RelaySettings.lease_seconds``, 30 s by default). When its replacement
starts on the same host, the sweeper gives those rows back at once
(:func:`release_dead_claims`: claims by a process of this host that no longer
exists), so a restarted relay does not wait for the lease. (On another host,
or in a new container with a new host name, the lease still applies.)
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps
from sqlalchemy import Engine, select, update
from sqlalchemy.exc import ProgrammingError

from outbox.celery.faults import classify
from outbox.celery.state import RocketboxState, rocketbox_state
from outbox.celery.tasks import TRANSIENT_ERRORS
from outbox.models import transaction_table as t
from outbox.relay import RelayReport

__all__ = ["Sweeper", "SweeperStep", "release_dead_claims"]

log = logging.getLogger("rocketbox.celery")

#: the claim name of a worker's sweeper (``host:pid:sweeper``, lanes ``/1``, ``/2``...)
SWEEPER_RUN_ID = "sweeper"


class Sweeper:
    """Sweeps every ``interval`` seconds on its own thread (see the module doc)."""

    def __init__(self, state: RocketboxState, *, on_fatal: Callable[[str], None]) -> None:
        self.state = state
        self.interval = state.settings.sweep_interval
        self._on_fatal = on_fatal
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._watched: set[int] = set()  # publishers whose reconnects wake this sweeper

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rocketbox-sweeper", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def wake(self) -> None:
        """Sweep now instead of at the next tick (thread-safe; any thread)."""
        self._wake.set()

    def sweep(self) -> RelayReport | None:
        """One drain; None when it failed for a reason that passes (logged)."""
        settings = self.state.settings
        relay = self.state.relay(SWEEPER_RUN_ID)
        self._watch(relay.publisher)
        try:
            report = relay.drain(max_passes=settings.sweep_passes,
                                 older_than=settings.sweep_min_age)
        except (*TRANSIENT_ERRORS, ProgrammingError) as exc:
            fault = classify(exc)
            if fault is None or not fault.transient:
                raise  # the lane dies, the worker stops: waiting will not fix it
            if fault.component == "broker":
                log.warning("sweep failed: broker %s: %s; trying again in %.1fs or when the "
                            "broker is back", self.state.outbox.broker_display, fault.text,
                            self.interval)
            else:
                log.warning("sweep failed: database %s: %s; trying again in %.1fs",
                            self.state.outbox.engine.url.render_as_string(hide_password=True),
                            fault.text, self.interval)
            return None
        if report.relayed or report.failed:
            log.info("sweep relayed %d, failed %d, parked %d", report.relayed, report.failed,
                     report.parked)
        return report

    def _run(self) -> None:
        try:
            try:
                released = release_dead_claims(self.state.outbox.engine)
            except TRANSIENT_ERRORS as exc:
                log.warning("could not look for claims of dead relays (database): %s", exc)
            else:
                if released:
                    log.info("released %d row(s) claimed by relays of this host that died",
                             released)
            while not self._stop.is_set():
                self._wake.clear()
                report = self.sweep()
                if report is not None and report.relayed and not self._stop.is_set():
                    continue  # a backlog: drain on, do not wait for the tick
                self._wake.wait(self.interval)
        except Exception as exc:
            fault = classify(exc)
            if fault is not None:
                log.error("the sweeper lane stops: %s: %s", fault.component, fault.text)
                self._on_fatal(f"the sweeper lane stopped: {fault.component}: {fault.text}")
                return
            log.exception("the sweeper lane failed")
            self._on_fatal(f"the sweeper lane died: {exc!r}")

    def _watch(self, publisher: Any) -> None:
        """Wake this sweeper whenever ``publisher`` reconnects to the broker (once each)."""
        on_reconnect = getattr(publisher, "on_reconnect", None)
        if on_reconnect is None or id(publisher) in self._watched:
            return
        self._watched.add(id(publisher))
        on_reconnect(self.wake)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def release_dead_claims(engine: Engine) -> int:
    """Give back unrelayed rows claimed by a process of this host that is gone; returns how many.

    ``claimed_by`` is ``host:pid:...`` (:func:`~outbox.relay.worker_id`). A
    claim by a live process, or by another host, is left to its lease.
    """
    prefix = socket.gethostname() + ":"
    with engine.begin() as conn:
        claimers = conn.execute(select(t.c.claimed_by).distinct().where(
            t.c.relayed_at.is_(None), t.c.claimed_by.startswith(prefix, autoescape=True))
        ).scalars().all()
        dead = [c for c in claimers
                if c.split(":")[1].isdigit() and not _process_exists(int(c.split(":")[1]))]
        if not dead:
            return 0
        result = conn.execute(update(t).where(t.c.relayed_at.is_(None),
                                              t.c.claimed_by.in_(dead))
                              .values(claimed_by=None, claimed_until=None))
        return result.rowcount or 0


class SweeperStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Start the sweeper lane with the worker (main process), stop it with the worker."""

    label = "rocketbox sweeper"
    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._sweeper: Sweeper | None = None

    def start(self, worker: Any) -> None:
        state = rocketbox_state(worker.app)
        self._sweeper = Sweeper(state, on_fatal=state.report_fatal)
        self._sweeper.start()
        log.info("sweeper lane: every %.1fs, rows older than %.1fs",
                 state.settings.sweep_interval, state.settings.sweep_min_age)

    def stop(self, worker: Any) -> None:
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.stop()

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
