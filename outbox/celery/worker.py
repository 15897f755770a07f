"""``run_worker``: the relay worker behind ``rocketbox relay``.

It builds the app with :func:`~outbox.celery.app.make_celery` and runs a
Celery worker in this process: a ``threads`` pool of ``concurrency`` (the
relay waits on the network and the database, not the CPU), embedded beat for
the sweeper when ``beat`` is set, and the check-back responder as a bootstep
when ``checker`` is set. Mingle and gossip are off: rocketbox uses no remote
control, and they only slow the start.
"""

from __future__ import annotations

import dataclasses

from outbox.celery.app import CelerySettings, PublisherFactory, make_celery
from outbox.config import Outbox
from outbox.errors import ConfigurationError

__all__ = ["run_worker", "worker_argv"]


def worker_argv(*, concurrency: int, beat: bool, loglevel: str,
                pool: str = "threads") -> list[str]:
    """The ``celery worker`` arguments :func:`run_worker` uses."""
    if concurrency < 1:
        raise ConfigurationError(f"concurrency must be >= 1, got {concurrency}")
    argv = ["worker", f"--pool={pool}", f"--concurrency={concurrency}",
            f"--loglevel={loglevel.upper()}", "--without-mingle", "--without-gossip"]
    if beat:
        argv.append("--beat")
    return argv


def run_worker(outbox: Outbox, *, celery_broker: str, celery_backend: str | None,
               concurrency: int, beat: bool, loglevel: str, checker: bool = True,
               settings: CelerySettings | None = None,
               publisher_factory: PublisherFactory | None = None) -> int:
    """Run the relay worker until it is stopped (SIGTERM); returns its exit code."""
    settings = dataclasses.replace(settings or CelerySettings(), checker=checker)
    app = make_celery(outbox, broker_url=celery_broker, backend_url=celery_backend,
                      settings=settings, publisher_factory=publisher_factory)
    try:
        app.worker_main(worker_argv(concurrency=concurrency, beat=beat, loglevel=loglevel))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(bool(exc.code))
    return 0
