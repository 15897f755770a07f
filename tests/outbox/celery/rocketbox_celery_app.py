"""The Celery app the worker tests run: ``celery -A tests.outbox.celery.rocketbox_celery_app
worker``.

Everything comes from environment variables the test sets (this is a test
module, an edge; the library itself never reads the environment):

``RB_TEST_DB``               SQLAlchemy URL of the outbox database
``RB_TEST_BROKER``           broker_lite HOST:PORT
``RB_TEST_CELERY_BROKER``    Celery broker URL (redis://... or sqla+sqlite:///...)
``RB_TEST_CELERY_BACKEND``   result backend URL (optional)
``RB_TEST_READY_FILE``       written when the worker (or checker) is ready
``RB_TEST_SWEEP``            the sweeper lane's interval in seconds (0: no sweeper)
``RB_TEST_LEASE``            the relay's lease in seconds
``RB_TEST_CHECKER``          "1": run the check-back responder as a worker bootstep
``RB_TEST_SWEEP_MIN_AGE``    the sweeper's ``sweep_min_age`` (default 0.2)
``RB_TEST_RETRY``            a failed task's first retry waits this long (seconds; default 0.2)
``RB_TEST_BROKEN_CONSUMER``  "1": a consumer bootstep fails at start (Celery's
                             ``Unrecoverable error``)
``RB_TEST_KILL_AFTER_HALVES``  a marker path: the first relay pass that sent halves
                             creates it and SIGKILLs this process before the ends

``python rocketbox_celery_app.py worker|checker`` runs :func:`run_worker` or
:func:`run_checker` with the same settings.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from celery import bootsteps
from celery.signals import celeryd_init, worker_ready
from sqlalchemy import create_engine

from outbox import BrokerLitePublisher, Outbox, RelaySettings
from outbox.celery import CelerySettings, make_celery, run_worker
from outbox.checkback_runner import run_checker
from outbox.targets import OutgoingMessage, Publisher
from tests.support.publishers import AfterHalves

env = os.environ


def _die_once(marker: Path) -> Callable[[Sequence[OutgoingMessage]], None]:
    """After the halves: SIGKILL this process before ending them (once per marker)."""

    def die(messages: Sequence[OutgoingMessage]) -> None:
        if not marker.exists():
            marker.write_text(",".join(m.tx_id for m in messages))
            os.kill(os.getpid(), signal.SIGKILL)

    return die


def _publisher(outbox: Outbox) -> Publisher:
    inner = BrokerLitePublisher(outbox)
    marker = env.get("RB_TEST_KILL_AFTER_HALVES")
    return AfterHalves(inner, _die_once(Path(marker))) if marker else inner


db_url = env["RB_TEST_DB"]
engine = create_engine(db_url, connect_args={"timeout": 30}) if db_url.startswith("sqlite") \
    else create_engine(db_url)
outbox = Outbox(engine=engine, broker=env["RB_TEST_BROKER"], local_tx_timeout=60.0,
                relay=RelaySettings(lease_seconds=float(env.get("RB_TEST_LEASE", "5")),
                                    batch_size=50, max_attempts=50, backoff_base=0.05,
                                    backoff_max=0.5, broker_timeout=1.0))
retry = float(env.get("RB_TEST_RETRY", "0.2"))
settings = CelerySettings(sweep_interval=float(env.get("RB_TEST_SWEEP", "0.5")),
                          sweep_min_age=float(env.get("RB_TEST_SWEEP_MIN_AGE", "0.2")),
                          retry_base=retry, retry_max=max(1.0, retry), max_retries=50,
                          checker=env.get("RB_TEST_CHECKER") == "1", polling_interval=0.05,
                          # the task path (the wake-up's tests: rocketbox_listen_app)
                          listen=False)
app = make_celery(outbox, broker_url=env["RB_TEST_CELERY_BROKER"],
                  backend_url=env.get("RB_TEST_CELERY_BACKEND") or None, settings=settings,
                  publisher_factory=_publisher)


class BrokenConsumerStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """A consumer step whose start fails: the worker stops with ``Unrecoverable error``."""

    def start(self, consumer: object) -> None:
        raise RuntimeError("a broken consumer step (RB_TEST_BROKEN_CONSUMER)")


@celeryd_init.connect
def _break_the_consumer(instance: Any, **_kwargs: object) -> None:
    """Any worker this process starts (run_worker makes its own app) gets the broken step."""
    if env.get("RB_TEST_BROKEN_CONSUMER") == "1":
        instance.app.steps["consumer"].add(BrokenConsumerStep)


def _write_ready() -> None:
    ready = env.get("RB_TEST_READY_FILE")
    if ready:
        Path(ready).write_text(str(os.getpid()))


@worker_ready.connect
def _on_worker_ready(**_kwargs: object) -> None:
    _write_ready()


if __name__ == "__main__":
    if sys.argv[1:] == ["checker"]:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        sys.exit(run_checker(outbox, on_ready=_write_ready))
    if sys.argv[1:] == ["worker"]:
        sys.exit(run_worker(outbox, celery_broker=env["RB_TEST_CELERY_BROKER"],
                            celery_backend=env.get("RB_TEST_CELERY_BACKEND") or None,
                            concurrency=2, sweeper=True, loglevel="INFO",
                            checker=settings.checker, settings=settings,
                            publisher_factory=_publisher))
    sys.exit(f"usage: {sys.argv[0]} worker|checker")
