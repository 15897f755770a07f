"""A loopback TCP forwarder that counts a client's round trips to its server.

A round trip is a turn of the conversation: the client writes (one chunk or
several), then waits for the server's answer. The forwarder logs which side
each chunk came from, in the order they arrived; every run of client chunks
that follows an answer (or opens the log) is one turn. Pipelined statements
written together make one turn however many statements they hold; four
statements each waiting for its answer make four.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

__all__ = ["TurnCounter"]


class TurnCounter:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (host, port) and counts turns."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._log: list[str] = []
        self._sockets: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def turns(self) -> int:
        """Client turns since the last :meth:`reset`."""
        with self._lock:
            log = list(self._log)
        return sum(1 for i, side in enumerate(log)
                   if side == "client" and (i == 0 or log[i - 1] == "server"))

    def reset(self) -> None:
        with self._lock:
            self._log.clear()

    def close(self) -> None:
        for sock in [self._server, *self._sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._accepting.join(5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            for src, dst, side in ((client, server, "client"), (server, client, "server")):
                threading.Thread(target=self._pump, args=(src, dst, side), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, side: str) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    dst.shutdown(socket.SHUT_WR)
                return
            with self._lock:  # logged before it is forwarded: an answer comes after it
                self._log.append(side)
            try:
                dst.sendall(data)
            except OSError:
                return


@contextlib.contextmanager
def counting(target: tuple[str, int]) -> Iterator[TurnCounter]:
    counter = TurnCounter(target)
    try:
        yield counter
    finally:
        counter.close()
