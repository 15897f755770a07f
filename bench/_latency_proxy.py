"""A TCP proxy that delays every chunk by a fixed time: a database "across the network".

Benchmarks run PostgreSQL on loopback, where a round trip costs about
100 µs. A production database is usually on another host, where a round
trip costs more, and saving one matters more. This proxy sits between a
client and PostgreSQL in its own process and forwards each chunk
``delay_us`` after it arrived, in order, in both directions, so every round
trip costs ``2 * delay_us`` more. Linux's netem would do the same in the
kernel, but it is not available on every machine (it is not on the
benchmark VM).

One thread per direction and connection reads, another sleeps until each
chunk is due and writes it (``time.sleep`` is precise to tens of µs here).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import socket
import threading
import time
from multiprocessing.connection import Connection as Pipe

__all__ = ["LatencyProxy"]


def _pump(src: socket.socket, dst: socket.socket, delay: float) -> None:
    due: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def write() -> None:
        while True:
            at, data = due.get()
            if not data:
                break
            wait = at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        _close(dst)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        due.put((time.perf_counter() + delay, data))
        if not data:
            break


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _serve(pipe: Pipe, upstream: tuple[str, int], delay_us: int, port: int) -> None:
    listener = socket.create_server(("127.0.0.1", port))
    pipe.send(listener.getsockname()[1])
    delay = delay_us / 1e6
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(upstream)
        except OSError:  # upstream down: the client sees its connection closed
            _close(client)
            continue
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=_pump, args=(client, server, delay), daemon=True).start()
        threading.Thread(target=_pump, args=(server, client, delay), daemon=True).start()


class LatencyProxy:
    """``with LatencyProxy(("127.0.0.1", pg_port), 250) as port:`` connect to ``port`` instead.

    ``port`` fixes the listening port (0: any free one), so a proxy stopped
    (every connection through it cut) can be started again where clients expect it.
    ``start_timeout`` bounds the wait for its process to listen (a fresh
    interpreter: seconds on a machine under heavy load).
    """

    def __init__(self, upstream: tuple[str, int], delay_us: int, port: int = 0, *,
                 start_timeout: float = 30.0) -> None:
        self.upstream, self.delay_us, self.port = upstream, delay_us, port
        self.start_timeout = start_timeout
        self._process: mp.process.BaseProcess | None = None

    def __enter__(self) -> int:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_serve, args=(child, self.upstream, self.delay_us, self.port), daemon=True)
        self._process.start()
        if not parent.poll(self.start_timeout):
            self._process.kill()
            raise RuntimeError(f"the latency proxy did not start within "
                               f"{self.start_timeout:.0f} s")
        port: int = parent.recv()
        return port

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join(10)
