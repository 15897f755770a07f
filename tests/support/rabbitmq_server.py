"""A throw-away RabbitMQ node on private loopback ports, started as a plain process.

``rabbitmq-server`` (Debian's package; 3.10 here) is run as its own
``/usr/lib/rabbitmq/bin/rabbitmq-server`` script, never as a service:

* its node name is ``rocketbox-test-PID@localhost`` and everything it writes
  (Mnesia, logs, the Erlang cookie in ``$HOME``) goes to a temporary directory;
* AMQP listens on a free loopback port (``listeners.tcp``); the Erlang
  distribution port (``RABBITMQ_DIST_PORT``) and ``epmd`` (``ERL_EPMD_PORT``)
  are private too, and ``epmd`` is started by us in the foreground in its own
  process group, so it is stopped with the node (the one Erlang would start
  by itself daemonizes and outlives the test);
* no plugins (streams and quorum queues are in the core); ``guest`` may log
  in over loopback, which is the only place it listens.

Readiness is a successful AMQP connection, waited for with a deadline
(:data:`START_TIMEOUT`: a busy machine boots it slowly). :meth:`RabbitMQServer.stop`
and :meth:`RabbitMQServer.start` restart the node on the same port with
its data, as a restart mid-stream needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from procgroup import ExitedEarly, NotReady, Process
from tests.support.servers import (
    LOOPBACK,
    ServerStartError,
    ServerUnavailable,
    _make_tempdir,
    free_port,
)

__all__ = ["RABBITMQ_SERVER", "START_TIMEOUT", "RabbitMQServer", "start_rabbitmq"]

RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
EPMD_NAMES = ("/usr/lib/erlang/erts-*/bin/epmd", "/usr/bin/epmd")
#: a busy machine boots RabbitMQ slowly
START_TIMEOUT = 120.0
STOP_TIMEOUT = 60.0


def _epmd() -> str | None:
    found = shutil.which("epmd")
    if found:
        return found
    for pattern in EPMD_NAMES:
        matches = sorted(Path("/").glob(pattern.lstrip("/")))
        if matches:
            return str(matches[-1])
    return None


async def _connect_once(url: str) -> None:
    import aio_pika  # the rabbitmq extra; imported here so collection never needs it

    connection = await aio_pika.connect(url, timeout=5)
    await connection.close()


@dataclass
class RabbitMQServer:
    """One node: ``url`` is ``amqp://guest:guest@127.0.0.1:PORT/``."""

    port: int
    base_dir: Path
    dist_port: int
    epmd_port: int
    node: str
    epmd: Process = field(repr=False)
    process: Process = field(repr=False)

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@{LOOPBACK}:{self.port}/"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "rabbitmq.log"

    def ping(self) -> None:
        """Open and close one AMQP connection; raises when the node does not take it
        (a plain TCP connect first: the client logs every refused connection)."""
        socket.create_connection((LOOPBACK, self.port), timeout=2).close()
        asyncio.run(_connect_once(self.url))

    def env(self) -> dict[str, str]:
        base = self.base_dir
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(base),  # the Erlang cookie goes here
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": LOOPBACK,
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
        }

    def start(self, timeout: float = START_TIMEOUT) -> None:
        """Start the node (again), and wait until it takes an AMQP connection."""
        if not self.epmd.alive():
            self.epmd.start()
        self.process.start()
        try:
            self.process.wait_until(self._answers, timeout, interval=0.2,
                                    what=f"an AMQP connection on port {self.port}",
                                    ignore=(Exception,))
        except (NotReady, ExitedEarly) as exc:
            raise ServerStartError(f"rabbitmq-server: {exc}") from exc

    def _answers(self) -> bool:
        self.ping()
        return True

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the node politely (its data stays, for :meth:`start`)."""
        self.process.stop(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """SIGKILL the node, as a power cut would."""
        self.process.kill()

    def close(self) -> None:
        self.process.stop(signal.SIGTERM, STOP_TIMEOUT)
        self.epmd.stop(signal.SIGTERM, STOP_TIMEOUT)


@contextlib.contextmanager
def start_rabbitmq(*, timeout: float = START_TIMEOUT) -> Iterator[RabbitMQServer]:
    """A node on free loopback ports, stopped (and its directory removed) afterwards.

    Raises:
        ServerUnavailable: rabbitmq-server, epmd or aio-pika is not installed.
        ServerStartError: it did not take a connection within ``timeout`` seconds.
    """
    epmd = _epmd()
    if not RABBITMQ_SERVER.exists() or epmd is None:
        raise ServerUnavailable(f"{RABBITMQ_SERVER} or epmd is missing (Debian: apt-get "
                                f"install rabbitmq-server)")
    try:
        import aio_pika  # noqa: F401
    except ImportError:
        raise ServerUnavailable("aio-pika is missing: pip install 'rocketbox[rabbitmq]'") \
            from None
    base = _make_tempdir("rocketbox-rabbitmq-", None)
    port, dist_port, epmd_port = free_port(), free_port(), free_port()
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq-env.conf").write_text("")
    (base / "advanced.config").write_text("[].\n")
    (base / "rabbitmq.conf").write_text(
        f"listeners.tcp.1 = {LOOPBACK}:{port}\n"
        "loopback_users = none\n"
        # a test machine's disk is often nearly full; the node must still take messages
        "disk_free_limit.absolute = 1MB\n")
    log = base / "rabbitmq.log"
    server = RabbitMQServer(
        port, base, dist_port, epmd_port, f"rocketbox-test-{os.getpid()}-{port}@localhost",
        epmd=Process([epmd, "-port", str(epmd_port), "-address", LOOPBACK],
                     log=base / "epmd.log", cwd=base, name="epmd"),
        process=Process([RABBITMQ_SERVER], log=log, cwd=base, name="rabbitmq-server",
                        env=None))
    server.epmd.env = server.env()
    server.process.env = server.env()
    try:
        server.start(timeout)
        yield server
    finally:
        server.close()
        shutil.rmtree(base, ignore_errors=True)
