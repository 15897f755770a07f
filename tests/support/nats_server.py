"""A real nats-server with JetStream on a free loopback port, as redis-server is started.

:func:`start_nats` runs ``nats-server -js -sd DIR -p PORT -a 127.0.0.1`` in
its own process group (no systemd), polls until it answers a JetStream
request, and stops the group afterwards, removing its store directory.
:meth:`NatsServer.kill` and :meth:`NatsServer.restart` stop it hard and
start it again on the same port and store (a server restarted mid-stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from procgroup import Process
from tests.support.servers import (
    LOOPBACK,
    START_TIMEOUT,
    STOP_TIMEOUT,
    ServerUnavailable,
    _launch_answering,
    _make_tempdir,
    _spawn,
)

__all__ = ["NatsServer", "find_nats_server", "start_nats"]


def find_nats_server() -> str:
    """The ``nats-server`` binary (Debian puts it in /usr/sbin, not always on PATH)."""
    found = shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/bin")
    if found is None:
        raise ServerUnavailable("nats-server is not installed (Debian: apt-get install "
                                "nats-server; make system-deps)")
    return found


def _ping(port: int, timeout: float = 2.0, *, jetstream: bool = True) -> None:
    """One JetStream account-info request (a flush without JetStream); raises while the
    server is not ready."""
    import nats

    async def quiet(exc: Exception) -> None:
        """nats-py prints each refused connection otherwise: here that means "not yet"."""

    async def ask() -> None:
        client = await nats.connect(f"nats://{LOOPBACK}:{port}", connect_timeout=timeout,
                                    allow_reconnect=False, max_reconnect_attempts=0,
                                    error_cb=quiet)
        try:
            if jetstream:
                await client.jetstream(timeout=timeout).account_info()
            else:
                await client.flush(max(1, round(timeout)))
        finally:
            await client.close()

    asyncio.run(ask())


@dataclass
class NatsServer:
    """A nats-server with JetStream (file store under ``store_dir``) on ``host:port``."""

    host: str
    port: int
    base_dir: Path
    binary: str
    jetstream: bool = True
    #: more nats-server arguments (``--tls ...``)
    extra: tuple[str, ...] = ()
    process: Process | None = field(default=None, compare=False, repr=False)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.base_dir / "store"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "nats.log"

    def argv(self, port: int) -> list[str]:
        js = ["-js", "-sd", os.fspath(self.store_dir)] if self.jetstream else []
        return [self.binary, *js, "-p", str(port), "-a", LOOPBACK, *self.extra]

    def ping(self) -> None:
        _ping(self.port, jetstream=self.jetstream)

    def kill(self) -> None:
        """SIGKILL the server (its store stays)."""
        assert self.process is not None
        self.process.stop(sig=signal.SIGKILL, timeout=STOP_TIMEOUT)

    def start_again(self, timeout: float = START_TIMEOUT) -> None:
        """Start it on the same port and store, and wait until JetStream answers."""
        self.process = _spawn(self.argv(self.port), log=self.log_path, cwd=self.base_dir,
                              name="nats-server")
        self.process.wait_until(self._answers, timeout, what=f"answering on port {self.port}",
                                ignore=(Exception,))

    def _answers(self) -> bool:
        self.ping()
        return True

    def restart(self) -> None:
        self.kill()
        self.start_again()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=STOP_TIMEOUT)


@contextlib.contextmanager
def start_nats(*, timeout: float = START_TIMEOUT, jetstream: bool = True,
               extra: tuple[str, ...] = ()) -> Iterator[NatsServer]:
    """Start ``nats-server -js`` on a free loopback port with a fresh store directory
    (``jetstream=False``: a plain nats-server, without ``-js``; ``extra``: more arguments).

    Raises:
        ServerUnavailable: nats-server is not installed.
        ServerStartError: it did not answer within ``timeout`` seconds (its log tail).
    """
    binary = find_nats_server()
    base = _make_tempdir("rocketbox-nats-", None)
    server = NatsServer(LOOPBACK, 0, base, binary, jetstream, extra)
    started: list[Process] = []
    try:
        def launch(port: int) -> Process:
            return _spawn(server.argv(port), log=server.log_path, cwd=base, name="nats-server")

        def probe(port: int) -> None:
            _ping(port, jetstream=jetstream)

        port = _launch_answering("nats-server", launch, probe, ignore=(Exception,),
                                 timeout=timeout, started=started)
        server.port, server.process = port, started[-1]
        yield server
    finally:
        for proc in started:
            proc.stop(timeout=STOP_TIMEOUT)
        if server.process is not None and server.process not in started:
            server.process.stop(timeout=STOP_TIMEOUT)
        shutil.rmtree(base, ignore_errors=True)
