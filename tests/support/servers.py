"""Start real servers on free loopback ports, and always clean them up: PostgreSQL and
Redis here, broker_lite in :mod:`tests.support.broker_server`.

Each ``start_*`` function is a context manager. On entry it starts one server
in its own process group, polls until the server answers (never a bare
sleep), and yields a small frozen description of it. On exit it stops the
whole process group (a polite signal first, ``SIGKILL`` after a deadline) and
removes every temporary directory it made.

Errors:

    Exception
     ├── ServerUnavailable    a binary or OS account is missing on this machine:
     │                        fixtures skip locally and fail in CI
     └── RuntimeError
          └── ServerStartError  the server is installed but did not come up;
                                the message carries the tail of its log
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

from procgroup import ExitedEarly, NotReady, Process

__all__ = [
    "LOOPBACK",
    "PostgresServer",
    "RedisServer",
    "ServerStartError",
    "ServerUnavailable",
    "find_postgres_bindir",
    "free_port",
    "start_postgres",
    "start_redis",
]

LOOPBACK = "127.0.0.1"
POSTGRES_ROOT = Path("/usr/lib/postgresql")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
# A port from free_port() can be taken by someone else before the server
# binds it; a server that exits during start-up is retried on a new port.
START_ATTEMPTS = 3
REPO_ROOT = Path(__file__).resolve().parents[2]

_INITDB_ARGS = ("-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync")
# The cluster is thrown away after the session, so durability is switched off.
_POSTGRES_SETTINGS = {
    "listen_addresses": LOOPBACK,
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}
_REDIS_ARGS = ("--bind", LOOPBACK, "--save", "", "--appendonly", "no", "--daemonize", "no")



class ServerUnavailable(Exception):
    """A binary or OS account that the server needs is missing on this machine."""


class ServerStartError(RuntimeError):
    """The server is installed but did not come up; the message has its log tail."""


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on ``host`` that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------
# process plumbing: procgroup.Process (spawn in a session, wait, stop the group)


def _spawn(argv: Sequence[str | os.PathLike[str]], *, log: Path, cwd: Path | None = None,
           name: str | None = None) -> Process:
    """Start ``argv`` in a new session (own process group), output appended to ``log``."""
    return Process(argv, log=log, cwd=cwd, name=name).start()


def _launch_answering(
    what: str,
    launch: Callable[[int], Process],
    probe: Callable[[int], object],
    *,
    ignore: tuple[type[BaseException], ...],
    timeout: float,
    started: list[Process],
) -> int:
    """``launch(port)`` on a free port, poll ``probe(port)`` until it answers; return the port.

    ``probe`` answers by returning; raising one of ``ignore`` means "not yet".
    A process that exits while we wait (most likely someone took its port in
    the meantime) is retried on a new port, up to START_ATTEMPTS times. Each
    process is appended to ``started`` at once, so that the caller's cleanup
    stops it even when this raises.

    Raises:
        ServerStartError: the deadline passed, or every attempt exited.
    """
    last: ExitedEarly | None = None
    for _ in range(START_ATTEMPTS):
        port = free_port()
        proc = launch(port)
        started.append(proc)
        try:
            proc.wait_until(functools.partial(_answers, probe, port), timeout, interval=0.02,
                            what=f"answering on port {port}", ignore=ignore)
        except ExitedEarly as exc:
            last = exc
            continue
        except NotReady as exc:
            raise ServerStartError(f"{what}: {exc}") from exc
        return port
    raise ServerStartError(f"{what}: on each of {START_ATTEMPTS} ports tried: {last}")


def _answers(probe: Callable[[int], object], port: int) -> bool:
    probe(port)
    return True


def _make_tempdir(prefix: str, owner: pwd.struct_passwd | None) -> Path:
    """A fresh directory; chowned to ``owner`` when given (we are root then).

    A directory for another user goes under /tmp, which every user can
    traverse, whatever ``TMPDIR`` says.
    """
    parent = "/tmp" if owner is not None else None
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return path


# --------------------------------------------------------------------------
# PostgreSQL


@dataclass(frozen=True)
class PostgresServer:
    """A throw-away PostgreSQL cluster listening on ``host:port``.

    The superuser is ``postgres`` with ``trust`` authentication, so the URLs
    carry no password.
    """

    host: str
    port: int
    bin_dir: Path
    base_dir: Path
    user: str = "postgres"
    dbname: str = "postgres"
    process: Process | None = field(default=None, compare=False, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "postgres.log"

    @property
    def url(self) -> str:
        """SQLAlchemy URL using the psycopg 3 driver."""
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{self.dbname}"

    @property
    def libpq_url(self) -> str:
        """Plain libpq URL, for ``psycopg.connect`` and ``psql``."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"

    def ping(self) -> None:
        """Run ``SELECT 1``; raises ``psycopg.OperationalError`` if the server is down."""
        with psycopg.connect(self.libpq_url, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")

    def create_database(self, name: str) -> PostgresServer:
        """Create database ``name`` and return a description pointing at it."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"database name must match [a-z_][a-z0-9_]{{0,62}}, got {name!r}")
        with psycopg.connect(self.libpq_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return dataclasses.replace(self, dbname=name)


def find_postgres_bindir(root: Path = POSTGRES_ROOT) -> Path:
    """The ``bin`` directory of the newest PostgreSQL under ``root``, else on PATH."""
    found: list[tuple[tuple[int, ...], Path]] = []
    for bin_dir in root.glob("*/bin"):
        if (bin_dir / "initdb").is_file() and (bin_dir / "postgres").is_file():
            version = tuple(int(p) for p in bin_dir.parent.name.split(".") if p.isdigit())
            found.append((version, bin_dir))
    if found:
        return max(found)[1]
    initdb = shutil.which("initdb")
    if initdb is not None and (Path(initdb).parent / "postgres").is_file():
        return Path(initdb).parent
    raise ServerUnavailable(
        f"PostgreSQL server binaries not found under {root}/*/bin or on PATH "
        "(Debian: apt-get install postgresql-15)"
    )


def _postgres_account() -> tuple[pwd.struct_passwd | None, list[str]]:
    """Who runs the cluster, and the argv prefix that switches to them.

    initdb and postgres refuse to run as root, so as root both run as the
    ``postgres`` OS user through ``runuser``. Otherwise they run as us.
    """
    if os.geteuid() != 0:
        return None, []
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        raise ServerUnavailable("running as root but there is no 'postgres' OS user") from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise ServerUnavailable("running as root but runuser(1) is not on PATH")
    return account, [runuser, "-u", "postgres", "--"]


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        first = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first)
    except (OSError, ValueError):
        return None


def _stop_postgres(proc: Process, data_dir: Path) -> None:
    """Fast shutdown (SIGINT to the postmaster itself), then kill what is left.

    The postmaster is signalled directly rather than through ``runuser``, so
    that it shuts down in order and frees its shared memory.
    """
    pid = _postmaster_pid(data_dir)
    if proc.alive() and pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        proc.stop(sig=None, timeout=STOP_TIMEOUT)
    else:
        proc.stop(sig=signal.SIGINT, timeout=STOP_TIMEOUT)


@contextlib.contextmanager
def start_postgres(*, timeout: float = START_TIMEOUT,
                   settings: Mapping[str, str] | None = None) -> Iterator[PostgresServer]:
    """Run ``initdb`` into a temp dir, start ``postgres`` on a free loopback port.

    ``settings`` override the throw-away defaults (``-c`` options), e.g.
    ``{"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}``
    for a benchmark that wants PostgreSQL's durable defaults.

    Raises:
        ServerUnavailable: binaries, the ``postgres`` user or runuser missing.
        ServerStartError: initdb failed, or the server did not accept a
            connection within ``timeout`` seconds.
    """
    bin_dir = find_postgres_bindir()
    account, prefix = _postgres_account()
    base = _make_tempdir("rocketbox-pg-", account)
    started: list[Process] = []
    try:
        data_dir, sock_dir = base / "data", base / "sock"
        sock_dir.mkdir()
        if account is not None:
            os.chown(sock_dir, account.pw_uid, account.pw_gid)
        initdb = subprocess.run(
            [*prefix, os.fspath(bin_dir / "initdb"), "-D", os.fspath(data_dir), *_INITDB_ARGS],
            cwd=base,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=max(timeout, 60.0),
            check=False,
        )
        if initdb.returncode != 0:
            raise ServerStartError(
                f"initdb exited with {initdb.returncode}:\n{initdb.stdout}\n{initdb.stderr}"
            )
        log = base / "postgres.log"

        def launch(port: int) -> Process:
            argv: list[str | os.PathLike[str]] = [*prefix, bin_dir / "postgres", "-D", data_dir]
            argv += ["-p", str(port), "-k", sock_dir]
            for key, value in {**_POSTGRES_SETTINGS, **(settings or {})}.items():
                argv += ["-c", f"{key}={value}"]
            return _spawn(argv, log=log, cwd=base, name="postgres")

        def probe(port: int) -> None:
            PostgresServer(LOOPBACK, port, bin_dir, base).ping()

        port = _launch_answering(
            "postgres",
            launch,
            probe,
            ignore=(psycopg.OperationalError,),
            timeout=timeout,
            started=started,
        )
        yield PostgresServer(LOOPBACK, port, bin_dir, base, process=started[-1])
    finally:
        for proc in started:
            _stop_postgres(proc, base / "data")
        # at exit, not here: a session's cluster holds thousands of files, and on a
        # busy machine removing them outlasted the timeout of the test it ended after
        atexit.register(shutil.rmtree, base, ignore_errors=True)


# --------------------------------------------------------------------------
# Redis


@dataclass(frozen=True)
class RedisServer:
    """A throw-away redis-server with no persistence, on ``host:port``."""

    host: str
    port: int
    base_dir: Path
    db: int = 0
    process: Process | None = field(default=None, compare=False, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/{self.db}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "redis.log"

    def ping(self) -> None:
        """PING; raises ``redis.exceptions.ConnectionError`` if the server is down."""
        with redis.Redis(host=self.host, port=self.port, socket_timeout=2) as client:
            client.ping()


@contextlib.contextmanager
def start_redis(*, timeout: float = START_TIMEOUT) -> Iterator[RedisServer]:
    """Start ``redis-server`` on a free loopback port, with saving switched off.

    Raises:
        ServerUnavailable: ``redis-server`` is not on PATH.
        ServerStartError: it did not answer PING within ``timeout`` seconds.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise ServerUnavailable(
            "redis-server is not on PATH (Debian: apt-get install redis-server)"
        )
    base = _make_tempdir("rocketbox-redis-", None)
    started: list[Process] = []
    try:
        log = base / "redis.log"

        def launch(port: int) -> Process:
            argv = [binary, "--port", str(port), "--dir", os.fspath(base), *_REDIS_ARGS]
            return _spawn(argv, log=log, cwd=base, name="redis-server")

        def probe(port: int) -> None:
            RedisServer(LOOPBACK, port, base).ping()

        port = _launch_answering(
            "redis-server",
            launch,
            probe,
            ignore=(redis.exceptions.ConnectionError,),
            timeout=timeout,
            started=started,
        )
        yield RedisServer(LOOPBACK, port, base, process=started[-1])
    finally:
        for proc in started:
            proc.stop(timeout=STOP_TIMEOUT)
        shutil.rmtree(base, ignore_errors=True)
