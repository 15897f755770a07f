"""The wake-up lane: PostgreSQL ``LISTEN/NOTIFY`` next to the relay tasks.

A ``rocketbox.relay`` task reaches a worker through the Celery broker: the
on_commit hook waits for its ``enqueue_window``, pushes the task to Redis,
the worker pops it and hands it to a pool thread. That is most of a row's
commit-to-visible time at a steady load, and none of it is the relay's work.

So with ``CelerySettings.listen`` on PostgreSQL the on_commit hook sends
``NOTIFY rocketbox_relay`` instead of a task (:func:`notify`, one autocommit
statement on a pooled connection, at once, no window; a first version sent
both, and the tasks' empty claims and Celery's per-task work cost the
listener more than they saved, bench/README.md), and every worker runs a
:class:`Listener` on a thread of its
main process: one connection of its own that ``LISTEN`` s on the channel and,
when woken, relays every due row right away (passes until a claim comes
back short). Notifications that arrive during a pass are taken together by
the next one, so the batch grows with the load instead of waiting for a
window.

This changes no guarantee. The status table stays the truth: the listener
is one more relay racing the tasks and the sweeper, kept apart by the same
claims (``SKIP LOCKED`` and the lease), and it relays nothing the status
table does not say is due. PostgreSQL delivers a notification only after its
transaction commits, to sessions listening then; one that is lost (the
listener reconnecting, the notifying statement failing, a worker restarted)
only leaves its rows to the next sweep (the sweeper lane, as for a task lost
with Redis: within about ``sweep_interval + sweep_min_age``). The tasks stay
registered (``rocketbox.sweep``, a hook made with ``listen`` off). On SQLite
there is no NOTIFY: the setting is ignored, the hook enqueues tasks and no
listener starts.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps
from sqlalchemy import Engine

from outbox.celery.state import RocketboxState, rocketbox_state
from outbox.celery.tasks import TRANSIENT_ERRORS

__all__ = ["CHANNEL", "ListenStep", "Listener", "can_listen", "notify"]

log = logging.getLogger("rocketbox.celery")

#: the channel the on_commit hook notifies and the workers listen on
CHANNEL = "rocketbox_relay"
#: the claim name of a worker's listener (``host:pid:listener``)
LISTENER_RUN_ID = "listener"
_NOTIFY = f"NOTIFY {CHANNEL}"


def can_listen(engine: Engine) -> bool:
    """Whether ``engine``'s database has ``LISTEN/NOTIFY`` (PostgreSQL)."""
    return engine.dialect.name == "postgresql"


def notify(engine: Engine) -> None:
    """Wake the listening relays (after a commit; never raises: a lost wake-up only waits)."""
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(_NOTIFY)
    except Exception as exc:  # never into the commit: the task or the sweeper relays the rows
        log.warning("could not notify %s, the relay task or the sweeper relays the rows: %s",
                    CHANNEL, exc)


def _conninfo(engine: Engine) -> str:
    """libpq's connection string for ``engine``'s database (whatever its driver)."""
    return engine.url.set(drivername="postgresql").render_as_string(hide_password=False)


class Listener:
    """Relays due rows whenever the channel is notified (see the module doc)."""

    def __init__(self, state: RocketboxState, *, on_fatal: Callable[[str], None],
                 retry_seconds: float = 1.0, wait_seconds: float = 0.5) -> None:
        self.state = state
        self._on_fatal = on_fatal
        self._retry = retry_seconds
        self._wait = wait_seconds  # how often the thread looks at its stop flag
        self._stop = threading.Event()
        #: set while the listener holds a ``LISTEN`` ing connection
        self.listening = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rocketbox-listener",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def relay_due(self) -> int:
        """Passes over due rows until a claim comes back short; the rows relayed."""
        relay = self.state.relay(LISTENER_RUN_ID)
        limit = self.state.outbox.relay.batch_size
        relayed = 0
        while not self._stop.is_set():
            report = relay.run_once()
            relayed += report.relayed
            if report.claimed < limit or report.relayed == 0:
                return relayed
        return relayed

    def _run(self) -> None:
        import psycopg

        try:
            while not self._stop.is_set():
                try:
                    self._listen(psycopg)
                except (psycopg.OperationalError, *TRANSIENT_ERRORS) as exc:
                    self.listening.clear()
                    log.warning("the wake-up listener lost %s (%s); listening again in "
                                "%.1fs (the sweeper covers the gap)", CHANNEL, exc, self._retry)
                    self._stop.wait(self._retry)
        except Exception as exc:
            log.exception("the wake-up listener failed")
            self._on_fatal(f"the wake-up listener died: {exc!r}")
        finally:
            self.listening.clear()

    def _listen(self, psycopg: Any) -> None:
        with psycopg.connect(_conninfo(self.state.outbox.engine), autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            while not self._stop.is_set():
                woken = False
                for _ in conn.notifies(timeout=self._wait, stop_after=1):
                    woken = True
                if not woken:
                    continue
                # the wake-ups already queued are answered by this same pass
                for _ in conn.notifies(timeout=0.0):
                    pass
                try:
                    self.relay_due()
                except TRANSIENT_ERRORS as exc:  # the broker is away: the sweeper retries
                    log.warning("relay after a wake-up failed: %s", exc)


class ListenStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Start the wake-up listener with the worker (main process), stop it with the worker."""

    label = "rocketbox wake-up listener"
    requires = {"celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._listener: Listener | None = None

    def start(self, worker: Any) -> None:
        state = rocketbox_state(worker.app)
        self._listener = Listener(state, on_fatal=state.report_fatal)
        self._listener.start()
        log.info("wake-up listener on %s", CHANNEL)

    def stop(self, worker: Any) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()

    def shutdown(self, worker: Any) -> None:
        self.stop(worker)
