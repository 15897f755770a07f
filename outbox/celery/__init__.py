"""Relaying with Celery: the app factory, the tasks, the on_commit hook, the worker.

::

    outbox = Outbox(engine=engine, broker="127.0.0.1:10911")
    app = make_celery(outbox, broker_url="redis://127.0.0.1:6379/0")
    outbox = dataclasses.replace(outbox, on_commit=celery_on_commit(app))

``publish()`` then enqueues ``rocketbox.relay`` after each commit, and a
worker (``rocketbox relay``, i.e. :func:`run_worker`, or ``celery -A module
worker``) relays the rows; its sweeper lane (:mod:`outbox.celery.sweeper`, a
thread of the worker, no beat) relays every ``CelerySettings.sweep_interval``
seconds whatever a lost task left behind.
"""

from __future__ import annotations

from outbox.celery.app import CelerySettings, RocketboxState, make_celery, rocketbox_state
from outbox.celery.hooks import celery_on_commit
from outbox.celery.tasks import END_TRANSACTION_TASK, RELAY_TASK, SWEEP_TASK
from outbox.celery.worker import run_worker

__all__ = [
    "END_TRANSACTION_TASK",
    "RELAY_TASK",
    "SWEEP_TASK",
    "CelerySettings",
    "RocketboxState",
    "celery_on_commit",
    "make_celery",
    "rocketbox_state",
    "run_worker",
]
