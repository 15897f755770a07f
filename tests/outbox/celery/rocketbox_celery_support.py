"""Worker and checker subprocesses for the Celery tests, plus database, outbox and broker
helpers.

A :class:`Proc` runs ``celery -A tests.outbox.celery.rocketbox_celery_app worker ...`` (or the
module's ``worker`` / ``checker`` entry points) in its own process group,
waits for the ready file the app module writes on Celery's ``worker_ready``
signal (or when the checker connected), and kills the whole group on exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import redis
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import Outbox, RelaySettings, publish
from outbox.celery import CelerySettings, celery_on_commit, make_celery
from outbox.models import transaction_table as t
from procgroup import Process
from tests.support import RedisServer, free_port, wait_until
from tests.support.commitlog import broker_records as broker_records  # re-exported
from tests.support.commitlog import commit_counts as commit_counts  # re-exported

HERE = Path(__file__).resolve().parent
#: the app module ``celery -A`` loads, as a package module of the checkout
APP_MODULE = "tests.outbox.celery.rocketbox_celery_app"
REPO = HERE.parents[2]
CELERY = Path(sys.executable).with_name("celery")
FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3")


class Proc(Process):
    """A started worker or checker subprocess (a :class:`procgroup.Process`)."""

    def log_text(self) -> str:
        return self.output()

    def log_tail(self) -> str:
        """The end of the log, for a failed wait's message."""
        return self.output()[-3000:]

    def kill(self, sig: signal.Signals = signal.SIGKILL,  # type: ignore[override]
             timeout: float = 15.0) -> int:
        """``sig`` to the group (SIGKILL by default), SIGKILL after ``timeout``; the exit."""
        code = self.stop(sig, timeout)
        assert code is not None
        return code


def app_env(*, db: str, broker: str, celery_broker: str, tmp: Path,
            **extra: str) -> dict[str, str]:
    """The environment the app module reads (see rocketbox_celery_app)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RB_TEST_")}
    env.update({
        # the checkout's root: the app is ``tests.outbox.celery.rocketbox_celery_app``
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "RB_TEST_DB": db, "RB_TEST_BROKER": broker, "RB_TEST_CELERY_BROKER": celery_broker,
    })
    env.update(extra)
    return env


@contextlib.contextmanager
def running(name: str, argv: list[str], env: Mapping[str, str], tmp: Path, *,
            timeout: float = 40.0) -> Iterator[Proc]:
    """Start ``argv`` and wait for its ready file; kill its process group on exit."""
    ready = tmp / f"ready-{name}-{uuid.uuid4().hex[:8]}"
    env = {**env, "RB_TEST_READY_FILE": str(ready)}
    proc = Proc(argv, log=tmp / f"{name}-{uuid.uuid4().hex[:6]}.log", env=env, cwd=HERE,
                name=name)
    try:
        proc.start().wait_until(ready.exists, timeout, what=f"{ready.name} written")
        yield proc
    finally:
        proc.kill()  # a graceful stop takes Celery seconds; tests that check it do so


def celery_worker(name: str, env: Mapping[str, str], tmp: Path, *, concurrency: int = 2,
                  sweeper: bool = True) -> contextlib.AbstractContextManager[Proc]:
    """``celery -A rocketbox_celery_app worker --pool=threads``, with its sweeper lane unless
    ``sweeper`` is False."""
    argv = [str(CELERY), "-A", APP_MODULE, "worker", "--pool=threads",
            f"--concurrency={concurrency}", "--loglevel=INFO", "--without-mingle",
            "--without-gossip", "--without-heartbeat", "-n", f"{name}@%h"]
    if not sweeper:
        env = {**env, "RB_TEST_SWEEP": "0"}
    return running(name, argv, env, tmp)


def module_entry(name: str, command: str, env: Mapping[str, str],
                 tmp: Path) -> contextlib.AbstractContextManager[Proc]:
    """``python rocketbox_celery_app.py worker|checker`` (run_worker / run_checker)."""
    return running(name, [sys.executable, str(HERE / "rocketbox_celery_app.py"), command],
                   env, tmp)


# -- databases and the broker ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CeleryStack:
    """What a worker test starts from (the ``stack`` fixture): a fresh outbox database,
    a Redis database of its own on the session's server for Celery, and the test's folder
    for the workers' logs and ready files."""

    engine: Engine
    db_url: str
    redis: RedisServer
    tmp: Path

    def env(self, broker: str, **extra: str) -> dict[str, str]:
        """:func:`app_env` for this database and Redis, with broker_lite at ``broker``."""
        return app_env(db=self.db_url, broker=broker, celery_broker=self.redis.url,
                       tmp=self.tmp, **extra)


def hooked_outbox(engine: Engine, broker: str, celery_broker: str, *,
                  settings: CelerySettings | None = None,
                  window: float | None = None) -> Outbox:
    """The web side: an outbox whose on_commit enqueues rocketbox.relay on ``celery_broker``
    (the task path unless ``settings`` turn the wake-up on)."""
    outbox = Outbox(engine=engine, broker=broker, relay=RelaySettings(broker_timeout=1.0))
    app = make_celery(outbox, broker_url=celery_broker,
                      settings=settings or CelerySettings(listen=False))
    return dataclasses.replace(outbox, on_commit=celery_on_commit(app, window=window))


def commit(engine: Engine, outbox: Outbox, n: int, topic: str = "Faults", *,
           message_group: str | None = None) -> list[str]:
    """``n`` units of work, one message each; their ids."""
    ids = []
    for i in range(n):
        with Session(engine) as session, session.begin():
            ids.append(publish(session, topic, {"n": i}, outbox=outbox,
                               message_group=message_group))
    return ids


def wait_relayed(engine: Engine, ids: set[str], *procs: Proc, timeout: float = 20.0) -> None:
    """Wait until exactly ``ids`` are relayed; on timeout, show the ``procs``' logs."""
    wait_until(lambda: relayed_ids(engine) == ids, timeout=timeout,
               message=lambda: "".join(proc.output()[-3000 // len(procs):] for proc in procs))


def fixed_port_broker(tmp: Path) -> tuple[Path, list[str], str]:
    """``(data_dir, serve args, address)`` of a broker to stop and start again on one port."""
    port = free_port()
    return tmp / "broker", [*FAST_BROKER, "--port", str(port)], f"127.0.0.1:{port}"


def relayed_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id).where(t.c.relayed_at.is_not(None))).scalars())


# -- a Redis that can be killed and started again on the same port --------------------


class RestartableRedis:
    """``redis-server`` without persistence on a fixed loopback port: ``kill()`` is kill -9,
    ``start()`` brings a new, empty one up on the same port and waits for PING."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.dir = tmp
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        argv = [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
                "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.dir)]
        with (self.dir / "redis.log").open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        wait_until(self._answers, timeout=20, interval=0.02,
                   message=lambda: f"redis did not come back on {self.port}")

    def _answers(self) -> bool:
        try:
            with redis.Redis(port=self.port, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.exceptions.ConnectionError:
            return False

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def __enter__(self) -> RestartableRedis:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
