"""The servers a chaos run breaks: PostgreSQL, Redis, broker_lite, the relay and the checker.

Each is started with the test helpers of ``tests/support/servers.py`` (their
process groups, readiness polls and clean-up), then killed and started again
on the same port and data as the fault schedule says:

* PostgreSQL: ``start_postgres`` (``synchronous_commit`` on, as in
  production: an acknowledged commit survives a crash of the server), restarted
  with ``pg_ctl restart -m immediate``; stopped with ``pg_ctl stop`` at the end.
* Redis: ``redis-server`` with an append-only file (``appendfsync everysec``);
  a restart *with* persistence keeps the file, one *without* deletes it first.
* broker_lite: ``start_broker_lite`` on a data dir on its own tmpfs (when the
  run may fill its disk), restarted on the ports it first announced.
* ``rocketbox relay --no-checker`` and ``rocketbox checker``, each in its own
  process group; they reach the broker through a :class:`LatencyProxy`, and the
  producer reaches PostgreSQL through another, so delays and cuts hit one link.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
from _common import REPO_ROOT
from _latency_proxy import LatencyProxy

from procgroup import Process
from tests.support.broker_server import BrokerLiteServer, start_broker_lite
from tests.support.servers import (
    LOOPBACK,
    PostgresServer,
    _postgres_account,
    free_port,
    start_postgres,
)
from tests.support.waiting import wait_until

__all__ = ["BROKER_DISK_MB", "Cluster", "Proxy", "Service", "cluster"]

#: the broker's tmpfs; a disk-full fault fills what is left of it
BROKER_DISK_MB = 256
BROKER_FLAGS = ("--tx-timeout", "3", "--tx-check-interval", "2", "--segment-size", "4m")
UNIT_TABLE = "chaos_unit"
#: how long a server may take to start (or Redis to answer again): the suite runs under
#: ``nice`` on a shared machine, where ``initdb`` alone took over 60 s at a load average of 20
READY_TIMEOUT = 600.0
#: a proxy restarted to clear a link fault is a fresh interpreter; under a load average of
#: 30 at ``nice 10`` it took over 30 s to listen (the run then left the link cut)
PROXY_START_TIMEOUT = 300.0


def python_env() -> dict[str, str]:
    """The children's environment: this repository (and tests/) on the path, after whatever
    ``PYTHONPATH`` already names (a copy of another commit's ``outbox``, say)."""
    first = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = os.pathsep.join([*first, str(REPO_ROOT), str(REPO_ROOT / "tests")])
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


class Service(Process):
    """A command in its own process group, killed with SIGKILL and started again the same way."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        super().__init__(argv, log=log, cwd=REPO_ROOT, env=python_env(), name=name)

    def exited(self) -> int | None:
        """The exit status if the process ended on its own (or was killed), else None."""
        return self.poll()


class Proxy:
    """A :class:`LatencyProxy` on a fixed port: set a delay, or cut every connection."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = free_port()
        self._proxy: LatencyProxy | None = None

    def up(self, delay_ms: float = 0.0) -> None:
        self.down()
        proxy = LatencyProxy(self.upstream, int(delay_ms * 1000), port=self.port,
                             start_timeout=PROXY_START_TIMEOUT)
        proxy.__enter__()
        self._proxy = proxy

    def down(self) -> None:
        if self._proxy is not None:
            self._proxy.__exit__(None, None, None)
            self._proxy = None


@dataclass
class Cluster:
    work: Path
    pg: PostgresServer
    redis_argv: list[str]
    redis_port: int
    redis_dir: Path
    broker_dir: Path
    broker: BrokerLiteServer
    broker_ports: tuple[str, str]
    relay_proxy: Proxy
    pg_proxy: Proxy
    relay: Service
    checker: Service
    redis_proc: Process | None = None
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    tmpfs: bool = False

    # -- addresses ------------------------------------------------------------------------

    @property
    def db_url(self) -> str:
        return self.pg.url

    @property
    def app_db_url(self) -> str:
        """The producer's URL: through the app-to-PostgreSQL proxy."""
        return f"postgresql+psycopg://postgres@{LOOPBACK}:{self.pg_proxy.port}/postgres"

    @property
    def redis_url(self) -> str:
        return f"redis://{LOOPBACK}:{self.redis_port}/0"

    @property
    def broker_native(self) -> str:
        return self.broker.native

    # -- Redis ----------------------------------------------------------------------------

    def start_redis(self) -> None:
        if self.redis_proc is not None and self.redis_proc.alive():
            raise RuntimeError(f"Redis (pid {self.redis_proc.pid}) is already running")
        self.redis_proc = Process(self.redis_argv, log=self.work / "redis.log", cwd=self.redis_dir,
                                  name="redis-server").start()

        def answers() -> bool:
            with redis.Redis(port=self.redis_port, socket_timeout=2) as client:
                return bool(client.ping())

        wait_until(answers, timeout=READY_TIMEOUT, interval=0.05,
                   ignore=(redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError))

    def kill_redis(self, *, keep_data: bool) -> None:
        if self.redis_proc is not None:
            self.redis_proc.kill(timeout=10)
        if not keep_data:
            for path in self.redis_dir.iterdir():
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()

    # -- broker ---------------------------------------------------------------------------

    def start_broker(self) -> None:
        native, grpc = self.broker_ports
        extra = [*BROKER_FLAGS, "--port", native.rsplit(":", 1)[1],
                 "--grpc-port", grpc.rsplit(":", 1)[1]]
        self.broker = self.stack.enter_context(
            start_broker_lite(self.broker_dir, extra, timeout=READY_TIMEOUT))

    def kill_broker(self) -> None:
        self.broker.kill()

    # -- PostgreSQL -----------------------------------------------------------------------

    def pg_ctl(self, *args: str) -> None:
        _account, prefix = _postgres_account()
        subprocess.run([*prefix, str(self.pg.bin_dir / "pg_ctl"), *args, "-D",
                        str(self.pg.data_dir), "-w", "-t", f"{READY_TIMEOUT:.0f}", "-l",
                        str(self.pg.base_dir / "pg_ctl.log")],
                       check=True, capture_output=True, timeout=READY_TIMEOUT + 60)

    def restart_postgres(self) -> None:
        """``pg_ctl restart -m immediate``: a crash of the server, then its recovery."""
        self.pg_ctl("restart", "-m", "immediate")

    def sql(self, query: str, *params: object) -> list[tuple[object, ...]]:
        with psycopg.connect(self.pg.libpq_url, autocommit=True, connect_timeout=60) as conn:
            cur = conn.execute(query, params or None)
            return list(cur.fetchall()) if cur.description else []


def _mount_tmpfs(path: Path, megabytes: int) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs",
                           str(path)], capture_output=True, check=False)
    return done.returncode == 0


@contextlib.contextmanager
def cluster(work: Path, *, concurrency: int = 2) -> Iterator[Cluster]:
    """Every server up, the outbox migrated, the unit table made; all torn down on exit."""
    stack = contextlib.ExitStack()
    with stack:
        pg = stack.enter_context(start_postgres(settings={"synchronous_commit": "on"},
                                                    timeout=READY_TIMEOUT))
        subprocess.run([sys.executable, "-m", "outbox", "migrate", "--db", pg.url],
                       check=True, capture_output=True, env=python_env(), cwd=REPO_ROOT)
        with psycopg.connect(pg.libpq_url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {UNIT_TABLE} (unit_id text PRIMARY KEY, "
                         "created_at timestamptz NOT NULL DEFAULT now())")
        redis_dir = work / "redis"
        redis_dir.mkdir()
        redis_port = free_port()
        binary = shutil.which("redis-server") or "redis-server"
        redis_argv = [binary, "--port", str(redis_port), "--bind", LOOPBACK, "--dir",
                      str(redis_dir), "--save", "", "--appendonly", "yes",
                      "--appendfsync", "everysec", "--daemonize", "no"]
        broker_dir = work / "broker"
        broker_dir.mkdir()
        tmpfs = _mount_tmpfs(broker_dir, BROKER_DISK_MB)
        if tmpfs:
            stack.callback(subprocess.run, ["umount", "-l", str(broker_dir)], check=False)
        broker = stack.enter_context(start_broker_lite(broker_dir, BROKER_FLAGS,
                                                       timeout=READY_TIMEOUT))
        host = broker.native.rsplit(":", 1)[0]
        relay_proxy = Proxy((host, int(broker.native.rsplit(":", 1)[1])))
        pg_proxy = Proxy((LOOPBACK, pg.port))
        via_proxy = f"{LOOPBACK}:{relay_proxy.port}"
        outbox = [sys.executable, "-m", "outbox"]
        relay = Service("relay", [*outbox, "relay", "--db", pg.url, "--broker", via_proxy,
                                  "--celery-broker", f"redis://{LOOPBACK}:{redis_port}/0",
                                  "--concurrency", str(concurrency), "--no-checker",
                                  "--log-level", "WARNING"], work / "relay.log")
        checker = Service("checker", [*outbox, "checker", "--db", pg.url, "--broker",
                                      via_proxy, "--log-level", "WARNING"], work / "checker.log")
        c = Cluster(work, pg, redis_argv, redis_port, redis_dir, broker_dir, broker,
                    (broker.native, broker.grpc), relay_proxy, pg_proxy, relay, checker,
                    stack=stack, tmpfs=tmpfs)
        stack.callback(_stop_all, c)
        c.start_redis()
        relay_proxy.up()
        pg_proxy.up()
        relay.start()
        checker.start()
        yield c


def _stop_all(c: Cluster) -> None:
    for service in (c.relay, c.checker):
        service.stop()
    for proxy in (c.relay_proxy, c.pg_proxy):
        proxy.down()
    if c.redis_proc is not None:
        c.redis_proc.stop(timeout=10)
    with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
        c.pg_ctl("stop", "-m", "fast")  # the postmaster pg_ctl restarted is not start_postgres's
