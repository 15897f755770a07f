"""The Celery app factory: :func:`make_celery` and the per-app state the tasks use.

The app is dedicated to rocketbox: its tasks go to the ``rocketbox`` queue
(``CelerySettings.queue``), they are acked late (a worker killed mid-task
leaves the task to be redelivered: with Redis after ``visibility_timeout``,
see :func:`redis_visibility_timeout`), and a worker prefetches one task at a
time. Every worker runs the sweeper lane (:mod:`outbox.celery.sweeper`): a
thread that relays what the tasks missed every ``sweep_interval`` seconds,
straight from the database, so no queue backlog and no Redis outage can
delay it. There is no beat schedule. The consumer reconnects to a lost Celery
broker within a second (:mod:`outbox.celery.consumer`), forever. Remote
control stays on although rocketbox does not use it: its channel is what
notices a lost Redis when every prefetch slot is taken by a task whose ack
failed (the task channel does not poll then).

Two broker setups are tested:

* embedded: kombu's SQLAlchemy transport over SQLite
  (``sqla+sqlite:///celery.sqlite``, results ``db+sqlite:///...``), polled
  every ``polling_interval`` seconds;
* production: Redis (``redis://host:6379/0``) for tasks and results.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from outbox.celery import redis_transport, sqla
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.relay import Relay, backoff_seconds, worker_id
from outbox.targets import ProcessPublishers, Publisher
from outbox.targets.choose import publisher_for

__all__ = ["CelerySettings", "PublisherFactory", "RocketboxState", "make_celery",
           "redis_visibility_timeout", "rocketbox_state"]

log = logging.getLogger("rocketbox.celery")

#: builds the relay's broker seam for one worker process
PublisherFactory = Callable[[Outbox], Publisher]
_STATE_ATTRIBUTE = "rocketbox_state"


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
    #: PostgreSQL, opt-in: the on_commit hook sends ``NOTIFY rocketbox_relay`` instead
    #: of a task and each worker listens for it and relays at once
    #: (:mod:`outbox.celery.listen`); the sweeper relays what a lost notification
    #: left. Ignored on SQLite (no NOTIFY)
    listen: bool = False

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

    def __post_init__(self) -> None:
        self._publishers = ProcessPublishers(lambda: self.publisher_factory(self.outbox))

    def publisher(self) -> Publisher:
        """This process's publisher (made on first use; a forked child makes its own)."""
        return self._publishers.get()

    def relay(self, run_id: str | None = None) -> Relay:
        """A relay named after this worker and the run (its claims are its own)."""
        name = worker_id() + (f":{run_id}" if run_id else f":{threading.get_ident()}")
        return Relay(self.outbox, self.publisher(), name=name[:255])

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
    state = getattr(app, _STATE_ATTRIBUTE, None)
    if not isinstance(state, RocketboxState):
        raise ConfigurationError("this Celery app was not made by outbox.celery.make_celery")
    return state


def redis_visibility_timeout(outbox: Outbox, settings: CelerySettings) -> float:
    """Seconds before Redis delivers an unacknowledged task again (kombu's ``visibility_timeout``).

    A task is unacknowledged from delivery until it returns (``acks_late``),
    and a retried task waits for its countdown unacknowledged too. So the
    timeout covers the longest retry countdown (``retry_max``), the longest
    task (two relay passes, each bounded by ``broker_timeout``) and a lease's
    worth of margin: ``retry_max + 2 * broker_timeout + lease_seconds``, 110 s
    with the defaults (kombu's own default is one hour). A shorter timeout
    would deliver running tasks twice (harmless, relaying is idempotent, but
    wasted); a task lost with its worker is delivered again after it, and its
    rows are relayed by the sweeper lane long before that anyway.
    """
    return settings.retry_max + 2 * outbox.relay.broker_timeout + outbox.relay.lease_seconds


def _transport_defaults(broker_url: str, outbox: Outbox,
                        settings: CelerySettings) -> dict[str, Any]:
    if broker_url.startswith("sqla+"):
        return {"polling_interval": settings.polling_interval}
    if broker_url.startswith(("redis://", "rediss://")):
        # The on_commit hook must not hold up a commit while Redis is down: publishing
        # gives up after one quick retry (kombu's default retries for seconds); the
        # sweeper relays what could not be enqueued. The worker's own consuming
        # connection reconnects by itself (outbox.celery.consumer), not with these.
        return {"socket_connect_timeout": 1.0, "max_retries": 1, "interval_start": 0,
                "interval_step": 0.2, "interval_max": 0.5,
                "visibility_timeout": redis_visibility_timeout(outbox, settings)}
    return {}


def _freeze_startup_objects(**_kwargs: object) -> None:
    """A started worker (or pool process): move what exists now out of the collector's view.

    The worker's modules, app and caches live as long as the process. Without
    this, each full collection walks all of them: a 110 ms pause of the relay
    thread every few seconds at a steady load (bench/relay.py), which is the
    whole tail of commit-to-visible latency.
    """
    gc.collect()
    gc.freeze()


worker_ready.connect(_freeze_startup_objects, weak=False, dispatch_uid="rocketbox-gc-freeze")
worker_process_init.connect(_freeze_startup_objects, weak=False,
                            dispatch_uid="rocketbox-gc-freeze-child")


def make_celery(outbox: Outbox, *, broker_url: str, backend_url: str | None = None,
                settings: CelerySettings | None = None,
                publisher_factory: PublisherFactory | None = None, **conf: Any) -> Celery:
    """A Celery app with rocketbox's tasks, the sweeper lane and (optionally) the checker step.

    ``conf`` entries override the defaults (any Celery setting, lower-case).
    ``publisher_factory`` replaces :func:`~outbox.targets.choose.publisher_for` (broker_lite's
    or RocketMQ's publisher, by ``outbox.broker``'s scheme; a seam for tests).
    """
    # imported here: tasks and bootstep import this module
    from outbox.celery.bootstep import CheckbackStep, SuperviseStep
    from outbox.celery.listen import ListenStep, can_listen
    from outbox.celery.sweeper import SweeperStep
    from outbox.celery.tasks import register_tasks

    settings = settings or CelerySettings()
    app = Celery("rocketbox", broker=broker_url, backend=backend_url, set_as_current=False)
    defaults: dict[str, Any] = {
        "task_default_queue": settings.queue,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "broker_connection_retry_on_startup": True,
        # a relay never gives up on its Celery broker: the sweeper relays meanwhile
        "broker_connection_max_retries": None,
        "broker_transport_options": _transport_defaults(broker_url, outbox, settings),
        "worker_consumer": "outbox.celery.consumer:Consumer",
        "result_expires": 3600,
        "worker_hijack_root_logger": True,
    }
    defaults.update(sqla.transport_settings(broker_url, defaults["broker_transport_options"]))
    defaults.update(redis_transport.transport_settings(broker_url))
    defaults.update(conf)
    app.conf.update(defaults)
    state = RocketboxState(outbox=outbox, settings=settings,
                           publisher_factory=publisher_factory or publisher_for)
    setattr(app, _STATE_ATTRIBUTE, state)
    register_tasks(app)
    app.steps["worker"].add(SuperviseStep)
    if settings.sweep_interval > 0:
        app.steps["worker"].add(SweeperStep)
    if settings.listen and can_listen(outbox.engine):
        app.steps["worker"].add(ListenStep)
    if settings.checker:
        app.steps["worker"].add(CheckbackStep)

    def close(**_kwargs: object) -> None:
        state.close()

    worker_shutdown.connect(close, weak=False)
    worker_process_shutdown.connect(close, weak=False)
    return app
