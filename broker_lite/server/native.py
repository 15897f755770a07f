"""The native door: an asyncio TCP server that runs a :class:`Connection` per client.

It serves on a socket the caller has already bound (so the runtime knows the
real port before the broker opens its store), keeps track of its
connections, and closes them all on :meth:`NativeServer.close`. Python 3.11's
``Server.wait_closed`` does not wait for connections, so this class does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Mapping

from broker_lite.server.connection import Connection
from broker_lite.server.handlers import HANDLERS, Handler
from broker_lite.serving.context import ServerContext

__all__ = ["NativeServer", "bind_socket", "format_address"]

log = logging.getLogger("broker_lite.server")


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0 picks a free port); raises ``OSError``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    if not infos:  # pragma: no cover - getaddrinfo raises instead
        raise OSError(f"cannot resolve {host!r}")
    family, _, _, _, address = infos[0]
    return socket.create_server(address, family=family, backlog=1024, reuse_port=False)


def format_address(sock: socket.socket) -> str:
    """``"host:port"`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class NativeServer:
    """Accepts native-protocol connections and serves each until it or the server ends."""

    def __init__(self, ctx: ServerContext, *,
                 handlers: Mapping[int, Handler] = HANDLERS) -> None:
        """``handlers`` maps request codes to coroutines (the seam tests extend)."""
        self._ctx = ctx
        self._handlers = handlers
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> int:
        """How many clients are connected now."""
        return len(self._connections)

    async def start(self, sock: socket.socket) -> None:
        """Start accepting on ``sock`` (already bound and listening)."""
        if self._server is not None:
            raise RuntimeError("the native server is already started")
        self._server = await asyncio.start_server(
            self._accept, sock=sock, limit=256 * 1024)
        log.info("native door listening on %s", format_address(sock))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # not a TCP socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = Connection(self._ctx, reader, writer, handlers=self._handlers)
        self._connections.add(connection)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        log.debug("accepted %s", connection.remote_address)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)
            if task is not None:
                self._tasks.discard(task)

    def stop_accepting(self) -> None:
        """Close the listening socket; connected clients are still served."""
        if self._server is not None:
            self._server.close()

    async def close(self) -> None:
        """Stop accepting, then close every connection and wait for their tasks."""
        self.stop_accepting()
        await asyncio.gather(*(c.close() for c in list(self._connections)),
                             return_exceptions=True)
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        log.info("native door closed")
