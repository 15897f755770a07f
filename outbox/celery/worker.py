"""``run_worker``: the relay worker behind ``rocketbox relay``.

It builds the app with :func:`~outbox.celery.app.make_celery` and runs a
Celery worker in this process: a ``threads`` pool of ``concurrency`` (the
relay waits on the network and the database, not the CPU), the sweeper lane
(:mod:`outbox.celery.sweeper`) unless ``sweeper`` is False, and the check-back
responder as a bootstep when ``checker`` is set. No beat process: the
sweeper lane is a thread of the worker. Mingle and gossip are off: rocketbox
uses no remote control, and they only slow the start.

The return value is the worker's exit status: 0 after a requested stop
(SIGTERM, Ctrl-C), 1 after any fatal error (Celery's ``Unrecoverable
error``, the sweeper lane or the check-back responder dying), so a
supervisor that restarts on failure restarts it.
"""

from __future__ import annotations

import dataclasses
import warnings

from outbox.celery.app import CelerySettings, PublisherFactory, make_celery, rocketbox_state
from outbox.config import Outbox
from outbox.errors import ConfigurationError

__all__ = ["run_worker", "worker_argv"]


def worker_argv(*, concurrency: int, loglevel: str, pool: str = "threads") -> list[str]:
    """The ``celery worker`` arguments :func:`run_worker` uses."""
    if concurrency < 1:
        raise ConfigurationError(f"concurrency must be >= 1, got {concurrency}")
    return ["worker", f"--pool={pool}", f"--concurrency={concurrency}",
            f"--loglevel={loglevel.upper()}", "--without-mingle", "--without-gossip"]


def run_worker(outbox: Outbox, *, celery_broker: str, celery_backend: str | None,
               concurrency: int, loglevel: str, sweeper: bool | None = None,
               checker: bool = True, settings: CelerySettings | None = None,
               publisher_factory: PublisherFactory | None = None,
               beat: bool | None = None) -> int:
    """Run the relay worker until it is stopped (SIGTERM); returns its exit status.

    ``sweeper`` (default True) runs the sweeper lane in this worker; False
    leaves sweeping to other workers. ``beat`` is its deprecated old name
    (from the days the sweeper was a beat schedule).
    """
    if beat is not None:
        if sweeper is not None:
            raise ConfigurationError("run_worker: give sweeper=, not both sweeper= and "
                                     "its deprecated old name beat=")
        warnings.warn("run_worker(beat=...) is deprecated; use sweeper=...",
                      DeprecationWarning, stacklevel=2)
        sweeper = beat
    sweeper = True if sweeper is None else sweeper
    settings = settings or CelerySettings()
    settings = dataclasses.replace(settings, checker=checker,
                                   sweep_interval=settings.sweep_interval if sweeper else 0.0)
    app = make_celery(outbox, broker_url=celery_broker, backend_url=celery_backend,
                      settings=settings, publisher_factory=publisher_factory)
    code = 0
    try:
        app.worker_main(worker_argv(concurrency=concurrency, loglevel=loglevel))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(bool(exc.code))
    return rocketbox_state(app).exit_code(code)
