"""bench/broker.py's servers: ``broker-lite serve`` and ``redis-server`` as child processes.

Each runs under procgroup with its data in the scratch directory and its
log beside it, and reports the CPU time it has used
(:class:`ServerProcess`). :func:`servers` starts a broker and a Redis with
matched flush settings (``--flush async`` with ``appendfsync everysec``,
``--flush sync`` with ``appendfsync always``) and stops both afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import redis
from _broker_cases import READY_TIMEOUT, REDIS_FSYNC, STOP_TIMEOUT, FlushMode, console
from _common import add_repository_paths, auto_create_topics

add_repository_paths()

from procgroup import ExitedEarly, Process  # noqa: E402

__all__ = [
    "ServerProcess",
    "Servers",
    "free_port",
    "redis_py_parser",
    "redis_version",
    "servers",
    "start_broker",
    "start_redis",
]


class ServerProcess(Process):
    """A server started as a child process (procgroup), with its log file and CPU time."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *, cwd: Path) -> None:
        log_path.unlink(missing_ok=True)
        super().__init__(argv, log=log_path, cwd=cwd, name=name)
        self._ticks = os.sysconf("SC_CLK_TCK")
        self.start()

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the process (all its threads) has used so far."""
        with open(f"/proc/{self.pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self._ticks

    def stop(self, sig: signal.Signals | None = signal.SIGTERM,
             timeout: float = STOP_TIMEOUT) -> int | None:
        return super().stop(sig, timeout)


_BROKER_READY = re.compile(r"^broker_lite ready native=(\S+)", re.MULTILINE)


def start_broker(root: Path, flush: FlushMode, *, extra: Sequence[str] = (),
                 label: str = "") -> tuple[ServerProcess, str]:
    """``broker-lite serve --port 0`` on a fresh data dir; returns it and its native address.

    Run as ``python -m broker_lite`` from the scratch directory, so that the
    code measured is what this process imports (``--at-commit`` sets
    ``PYTHONPATH``; the current directory would otherwise come first).
    """
    data_dir = root / f"broker-{flush}{label}"
    shutil.rmtree(data_dir, ignore_errors=True)
    argv = [sys.executable, "-m", "broker_lite", "serve", "--data-dir", str(data_dir),
            "--port", "0", "--flush", flush, "--log-level", "warning", *auto_create_topics(),
            *extra]
    server = ServerProcess(f"broker-lite serve --flush {flush} {' '.join(extra)}".strip(),
                           argv, root / f"broker-{flush}{label}.log", cwd=root)
    try:
        return server, server.wait_for(_BROKER_READY, READY_TIMEOUT).group(1)
    except BaseException:
        server.stop()
        raise


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis(root: Path, flush: FlushMode) -> tuple[ServerProcess, int]:
    """``redis-server`` with AOF on (``appendfsync`` matched to ``flush``), no RDB snapshots,
    no automatic AOF rewrite (a fork in the middle of a run); returns it and its port."""
    data_dir = root / f"redis-{flush}"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    for _attempt in range(3):  # a free port may be taken between probing and binding
        port = free_port()
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes", "--appendfsync", REDIS_FSYNC[flush],
                "--auto-aof-rewrite-percentage", "0", "--dir", str(data_dir),
                "--daemonize", "no", "--loglevel", "warning"]
        server = ServerProcess(f"redis-server appendfsync {REDIS_FSYNC[flush]}", argv,
                               root / f"redis-{flush}.log", cwd=data_dir)
        try:
            with contextlib.closing(redis.Redis(host="127.0.0.1", port=port,
                                                socket_connect_timeout=0.5)) as client:
                server.wait_until(client.ping, READY_TIMEOUT, what="PING", interval=0.02,
                                  ignore=(redis.exceptions.ConnectionError,
                                          redis.exceptions.BusyLoadingError))
            return server, port
        except ExitedEarly:
            server.stop()  # most likely the port was taken: another one
        except BaseException:
            server.stop()
            raise
    raise RuntimeError("redis-server did not start (three ports tried)")


def redis_version() -> str:
    try:
        out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return next((w.split("=", 1)[1] for w in out.split() if w.startswith("v=")), out.strip())


def redis_py_parser() -> str:
    """Which reply parser redis-py uses: its own, in Python, unless hiredis is installed."""
    try:
        import hiredis  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        return "pure-Python parser, no hiredis"
    return "hiredis parser"


@dataclass(slots=True)
class Servers:
    """A broker and a Redis with matched flush settings."""

    flush: FlushMode
    broker: ServerProcess
    address: str
    redis: ServerProcess
    port: int

    def stop(self) -> None:
        for server in (self.broker, self.redis):
            try:
                server.stop()
            except Exception as exc:  # keep stopping the other one
                console.print(f"[yellow]warning:[/] stopping {server.name}: {exc}")


@contextlib.contextmanager
def servers(root: Path, flush: FlushMode) -> Iterator[Servers]:
    broker, address = start_broker(root, flush)
    try:
        redis_server, port = start_redis(root, flush)
    except BaseException:
        broker.stop()
        raise
    pair = Servers(flush, broker, address, redis_server, port)
    try:
        yield pair
    finally:
        pair.stop()
