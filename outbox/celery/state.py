"""The per-app state rocketbox's tasks, lanes and bootsteps read: :class:`RocketboxState`.

:func:`~outbox.celery.app.make_celery` builds it and attaches it to the app
(:func:`attach_state`); the tasks (:mod:`outbox.celery.tasks`), the sweeper
lane and the bootsteps find it with :func:`rocketbox_state`. It lives apart
from the factory so that they import it, and the factory imports them, with
no import circle.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.relay import Relay, backoff_seconds, worker_id
from outbox.targets import ProcessPublishers, Publisher

__all__ = ["CelerySettings", "PublisherFactory", "RocketboxState", "attach_state",
           "is_rocketbox_app", "rocketbox_state"]

log = logging.getLogger("rocketbox.celery")

#: builds the relay's broker seam for one worker process
PublisherFactory = Callable[[Outbox], Publisher]
STATE_ATTRIBUTE = "rocketbox_state"


@dataclass(frozen=True, slots=True, kw_only=True)
class CelerySettings:
    """How the Celery side behaves (the relay's own settings are ``Outbox.relay``)."""

    #: the worker's sweeper lane relays due rows this often (seconds); 0: no sweeper
    sweep_interval: float = 5.0
    #: at most this many relay passes per sweep (a sweep that relayed rows is
    #: followed at once by another, so a backlog never waits for the next tick)
    sweep_passes: int = 50
    #: the sweeper takes rows committed at least this long ago (seconds): younger
    #: rows are their tasks' (a row whose task was lost waits at most
    #: ``sweep_interval + sweep_min_age`` once the relay can reach the broker)
    sweep_min_age: float = 1.0
    #: a task's retry n waits ``min(retry_max, retry_base * 2**n)`` +-20 %
    retry_base: float = 1.0
    retry_max: float = 60.0
    max_retries: int = 10
    #: run the check-back responder inside the worker (a bootstep)
    checker: bool = False
    #: the queue rocketbox's tasks go to (and the worker consumes)
    queue: str = "rocketbox"
    #: kombu's SQLAlchemy transport: seconds between polls of the queue table
    polling_interval: float = 0.1
    #: the on_commit hook enqueues at most one ``rocketbox.relay`` task per this
    #: many seconds per process; commits in between share the next task
    #: (0: one task per commit; see :mod:`outbox.celery.hooks`)
    enqueue_window: float = 0.02
    #: PostgreSQL (with psycopg 3 installed): the relays are woken through
    #: ``NOTIFY rocketbox_relay``, sent with the commit, instead of a task, and each
    #: worker listens for it and relays at once (:mod:`outbox.celery.listen`); the
    #: sweeper relays what a lost notification left. Ignored on SQLite (no NOTIFY).
    #: False: the on_commit hook enqueues coalesced ``rocketbox.relay`` tasks
    listen: bool = True
    #: with ``listen``: the relay threads a wake-up goes to; a wake-up during a pass
    #: starts another pass on an idle lane instead of waiting for it to end (1: the
    #: listening thread relays itself, with no hand-off; wake-ups wait for its pass)
    listen_lanes: int = 1

    def __post_init__(self) -> None:
        if self.sweep_interval < 0 or self.retry_base <= 0 or self.retry_max <= 0:
            raise ConfigurationError("celery settings: sweep_interval >= 0, retry_base > 0 "
                                     "and retry_max > 0",
                                     setting="sweep_interval, retry_base, retry_max")
        if self.sweep_min_age < 0:
            raise ConfigurationError(f"celery settings: sweep_min_age must be >= 0, got "
                                     f"{self.sweep_min_age}", setting="sweep_min_age")
        if self.max_retries < 0 or self.sweep_passes < 1:
            raise ConfigurationError("celery settings: max_retries >= 0, sweep_passes >= 1",
                                     setting="max_retries, sweep_passes")
        if self.polling_interval <= 0:
            raise ConfigurationError("celery settings: polling_interval must be > 0",
                                     setting="polling_interval")
        if self.listen_lanes < 1:
            raise ConfigurationError(f"celery settings: listen_lanes must be >= 1, got "
                                     f"{self.listen_lanes}", setting="listen_lanes")
        if not 0 <= self.enqueue_window <= 5:
            raise ConfigurationError("celery settings: enqueue_window must be between 0 and "
                                     f"5 seconds, got {self.enqueue_window}",
                                     setting="enqueue_window")


@dataclass
class RocketboxState:
    """What the tasks of one app need: the outbox, settings, and a publisher per process."""

    outbox: Outbox
    settings: CelerySettings
    publisher_factory: PublisherFactory
    _publishers: ProcessPublishers = field(init=False)
    #: the running worker (``celery.worker.WorkController``), once it started
    worker: Any = field(default=None, init=False)
    #: why the worker must stop with a failure (a lane or the responder died)
    fatal_error: str | None = field(default=None, init=False)
    #: topics this worker's relays have relayed to: each new one is logged once
    seen_topics: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self._publishers = ProcessPublishers(lambda: self.publisher_factory(self.outbox))

    def publisher(self) -> Publisher:
        """This process's publisher (made on first use; a forked child makes its own)."""
        return self._publishers.get()

    def relay(self, run_id: str | None = None) -> Relay:
        """A relay named after this worker and the run (its claims are its own)."""
        name = worker_id() + (f":{run_id}" if run_id else f":{threading.get_ident()}")
        return Relay(self.outbox, self.publisher(), name=name[:255],
                     seen_topics=self.seen_topics)

    def retry_delay(self, retries: int) -> float:
        return backoff_seconds(retries + 1, self.settings.retry_base, self.settings.retry_max,
                               0.2)

    def close(self) -> None:
        """Close this process's publisher (worker shutdown)."""
        self._publishers.close()

    def report_fatal(self, reason: str) -> None:
        """A part of the worker died that the worker cannot run without: stop, and fail.

        Logs ``reason``, remembers it (:meth:`exit_code` is then 1) and asks the
        worker for a warm shutdown with SIGTERM, as a supervisor would.
        """
        log.critical("%s: stopping the worker", reason)
        if self.fatal_error is None:
            self.fatal_error = reason
        os.kill(os.getpid(), signal.SIGTERM)

    def exit_code(self, celery_code: int) -> int:
        """The worker's exit status: 1 after a fatal error, else the worker's own."""
        if self.fatal_error is not None:
            return 1
        worker_code = getattr(self.worker, "exitcode", None)
        if isinstance(worker_code, int) and worker_code != 0:
            return worker_code
        return celery_code


def rocketbox_state(app: Celery) -> RocketboxState:
    """The :class:`RocketboxState` :func:`make_celery` attached to ``app``."""
    state = getattr(app, STATE_ATTRIBUTE, None)
    if not isinstance(state, RocketboxState):
        raise ConfigurationError("this Celery app was not made by outbox.celery.make_celery")
    return state


def attach_state(app: Celery, state: RocketboxState) -> None:
    """Make ``app`` a rocketbox app: :func:`rocketbox_state` finds ``state`` on it."""
    setattr(app, STATE_ATTRIBUTE, state)


def is_rocketbox_app(app: object) -> bool:
    """True for an app :func:`~outbox.celery.app.make_celery` made."""
    return isinstance(getattr(app, STATE_ATTRIBUTE, None), RocketboxState)
