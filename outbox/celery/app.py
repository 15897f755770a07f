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
from typing import Any

from celery import Celery, current_app
from celery.signals import (
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from outbox.celery import redis_transport, sqla
from outbox.celery.bootstep import CheckbackStep, SuperviseStep
from outbox.celery.listen import ListenStep, can_listen
from outbox.celery.state import (
    CelerySettings,
    PublisherFactory,
    RocketboxState,
    attach_state,
    is_rocketbox_app,
    rocketbox_state,
)
from outbox.celery.sweeper import SweeperStep
from outbox.celery.tasks import register_tasks
from outbox.config import Outbox
from outbox.targets.choose import publisher_for

__all__ = ["CelerySettings", "PublisherFactory", "RocketboxState", "make_celery",
           "redis_visibility_timeout", "rocketbox_state"]

log = logging.getLogger("rocketbox.celery")

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
    if broker_url.startswith(sqla.SQLA_PREFIX):
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


def _freeze_startup_objects(sender: object = None, **_kwargs: object) -> None:
    """A started rocketbox worker (or its pool process): move what exists now out of the
    collector's view.

    The worker's modules, app and caches live as long as the process. Without
    this, each full collection walks all of them: a 110 ms pause of the relay
    thread every few seconds at a steady load (bench/relay.py), which is the
    whole tail of commit-to-visible latency. Only a worker of an app
    :func:`make_celery` made: another Celery worker in a process that imports
    this module keeps its collector as it was. ``worker_ready``'s sender is the
    worker's consumer (its ``app``); a pool process (``worker_process_init``,
    no sender) runs its worker's app as the current one.
    """
    app = getattr(sender, "app", None) if sender is not None else current_app
    if is_rocketbox_app(app):
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
    attach_state(app, state)
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
