"""A client's session with the broker: connect, stay connected, stay registered.

:class:`Session` owns the current :class:`Connection`. It says HELLO first
(signed when credentials are given), sends a HEARTBEAT with the client's
producer groups and consumer subscriptions right after every (re)connect and
then every ``heartbeat_interval`` seconds, and reconnects with exponential
backoff and jitter when the connection breaks. Requests made while it is
disconnected wait for the next connection, within their own deadline.

Everything here runs on one event loop; the sync clients drive it from a
background thread (:mod:`broker_lite.client.loop_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from broker_lite.client.async_client import AsyncClient
from broker_lite.client.auth import hello_request
from broker_lite.client.config import ClientConfig, make_client_id
from broker_lite.client.connection import Connection
from broker_lite.client.errors import BrokerUnavailableError, ClientClosedError
from broker_lite.errors import BrokerError, ProtocolError, ResponseCode
from broker_lite.protocol import PROTOCOL_VERSION, RequestCode
from broker_lite.protocol import messages as m

__all__ = ["ServerRequestHandler", "Session", "SessionClient"]

log = logging.getLogger("broker_lite.client.session")

T = TypeVar("T")

#: serves one kind of request the broker sends: raw body in, response body out
ServerRequestHandler = Callable[[bytes], Awaitable[Any]]


class Session:
    """The connection, HELLO, heartbeats and reconnects of one client."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.client_id = config.client_id or make_client_id()
        self.server = config.server
        self.hello: m.HelloResponse | None = None
        self._host, self._port = config.address
        self._conn: Connection | None = None
        self._connected = asyncio.Event()
        self._handlers: dict[int, ServerRequestHandler] = {}
        self._producer_groups: set[str] = set()
        self._subscriptions: dict[tuple[str, str], m.ConsumerSubscription] = {}
        self._on_connect: list[Callable[[], None]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self._closing = False
        self._last_error: BrokerError | None = None
        #: how many connections were made; the first is 1
        self.connections = 0

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Connect now; raises BrokerUnavailableError (or the HELLO's refusal) if it cannot."""
        if self._closing:
            raise ClientClosedError("this client was shut down; make a new one")
        if self._started:
            return
        conn = await self._connect()
        self._started = True
        self._install(conn)
        self._tasks = [
            asyncio.create_task(self._maintain(), name=f"reconnect {self.client_id}"),
            asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat {self.client_id}"),
        ]

    async def close(self, *, unregister: bool = True) -> None:
        """Unregister (best effort, briefly), stop the background tasks, close the socket."""
        if self._closing:
            return
        conn = self._conn
        if unregister and conn is not None and not conn.closed:
            with contextlib.suppress(BrokerError):
                await conn.request(RequestCode.UNREGISTER_CLIENT, self._heartbeat_body(),
                                   m.Empty, timeout=min(1.0, self.config.request_timeout))
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._conn is not None:
            await self._conn.close()
        self._conn = None
        self._connected.clear()

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    @property
    def closed(self) -> bool:
        return self._closing

    def on_connect(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (on the loop) after every reconnect, once registered."""
        self._on_connect.append(callback)

    def set_handler(self, code: int, handler: ServerRequestHandler) -> None:
        """Serve requests with ``code`` that the broker sends on this connection."""
        self._handlers[code] = handler

    # -- registration ------------------------------------------------------------

    def add_producer_group(self, group: str) -> None:
        self._producer_groups.add(group)

    def add_subscription(self, subscription: m.ConsumerSubscription) -> None:
        self._subscriptions[(subscription.group, subscription.topic)] = subscription

    def remove_subscription(self, group: str, topic: str) -> None:
        self._subscriptions.pop((group, topic), None)

    async def heartbeat(self) -> None:
        """Register now (after subscribing, before asking for an assignment)."""
        await self.request(RequestCode.HEARTBEAT, self._heartbeat_body(), m.Empty)

    def _heartbeat_body(self) -> m.HeartbeatRequest:
        return m.HeartbeatRequest(
            client_id=self.client_id,
            producer_groups=sorted(self._producer_groups),
            consumers=list(self._subscriptions.values()),
        )

    # -- requests ----------------------------------------------------------------

    async def request(self, code: RequestCode, body: Any, response_type: type[T], *,
                      timeout: float | None = None) -> T:
        """Send a request, waiting (within ``timeout``) for a connection if there is none."""
        budget = self.config.request_timeout if timeout is None else timeout
        conn = self._conn
        if conn is not None and not conn.closed:  # connected: the whole budget is left
            return await conn.request(code, body, response_type, budget)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        conn = await self._connection(budget)
        return await conn.request(code, body, response_type, max(0.001, deadline - loop.time()))

    async def oneway(self, code: RequestCode, body: Any, *, timeout: float | None = None) -> None:
        """Write a one-way request (waits for a connection, never for an answer)."""
        conn = await self._connection(self.config.request_timeout if timeout is None else timeout)
        conn.send_oneway(code, body)
        await conn.drain()

    async def _connection(self, timeout: float) -> Connection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._closing or not self._started:
            raise ClientClosedError(
                "the client is shut down" if self._closing else "call start() first")
        try:
            async with asyncio.timeout(timeout):
                while True:
                    await self._connected.wait()
                    conn = self._conn
                    if conn is not None and not conn.closed:
                        return conn
                    await asyncio.sleep(0.005)  # the reconnect task is clearing the event
        except TimeoutError:
            why = f": {self._last_error}" if self._last_error else ""
            raise BrokerUnavailableError(
                f"broker at {self.server} is unreachable (waited {timeout:.3g}s){why}",
                server=self.server) from None

    # -- connecting --------------------------------------------------------------

    async def _connect(self) -> Connection:
        """Open a socket, say HELLO, register; raise BrokerError on any failure."""
        conn = await Connection.open(
            self._host, self._port, server=self.server,
            connect_timeout=self.config.connect_timeout,
            max_frame_size=self.config.max_frame_size, handler=self._dispatch)
        try:
            hello = await conn.request(
                RequestCode.HELLO,
                hello_request(self.client_id, self.config.access_key, self.config.secret_key),
                m.HelloResponse, timeout=self.config.connect_timeout)
            if hello.protocol_version != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"broker at {self.server} speaks protocol {hello.protocol_version}, "
                    f"this client {PROTOCOL_VERSION}", code=ResponseCode.VERSION_NOT_SUPPORTED)
            if hello.max_frame_size:
                conn.max_frame_size = min(conn.max_frame_size, hello.max_frame_size)
            await conn.request(RequestCode.HEARTBEAT, self._heartbeat_body(), m.Empty,
                               timeout=self.config.request_timeout)
        except BaseException:
            await conn.close()
            raise
        self.hello = hello
        return conn

    def _install(self, conn: Connection) -> None:
        self._conn = conn
        self.connections += 1
        self._last_error = None
        self._connected.set()
        if self.connections > 1:
            log.info("reconnected to %s", self.server)
            for callback in self._on_connect:
                try:
                    callback()
                except Exception:
                    log.exception("on-connect callback failed")

    def _backoff(self, attempt: int) -> float:
        cap = min(self.config.reconnect_max_delay,
                  self.config.reconnect_min_delay * (2 ** min(attempt, 30)))
        return random.uniform(cap / 2, cap)  # jitter: reconnecting clients spread out

    async def _maintain(self) -> None:
        """Reconnect whenever the connection is lost, until the session closes."""
        attempt = 0
        while not self._closing:
            conn = self._conn
            if conn is not None:
                reason = await conn.wait_closed()
                self._conn = None
                self._connected.clear()
                self._last_error = reason
                if self.closed:  # close() ran while we waited
                    return
                log.warning("lost the connection to %s: %s", self.server, reason)
            await asyncio.sleep(self._backoff(attempt))
            try:
                conn = await self._connect()
            except BrokerError as exc:
                attempt += 1
                self._last_error = exc
                log.debug("reconnect to %s failed (attempt %d): %s", self.server, attempt, exc)
                continue
            attempt = 0
            self._install(conn)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            conn = self._conn
            if conn is None or conn.closed:
                continue  # the reconnect registers again
            try:
                await conn.request(RequestCode.HEARTBEAT, self._heartbeat_body(), m.Empty,
                                   timeout=self.config.request_timeout)
            except BrokerError as exc:
                log.warning("heartbeat to %s failed: %s", self.server, exc)

    async def _dispatch(self, code: int, body: bytes) -> Any:
        handler = self._handlers.get(code)
        if handler is None:
            raise ProtocolError(f"client {self.client_id} does not serve request code {code}",
                                code=ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        return await handler(body)


class SessionClient(AsyncClient):
    """Base of the asyncio clients: one :class:`Session`, started and closed with them."""

    session: Session

    @property
    def client_id(self) -> str:
        return self.session.client_id

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (a lost one is retried in the background)."""
        return self.session.connected

    def on_connect(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the client's loop each time a lost connection is back;
        it must return at once."""
        self.session.on_connect(callback)

    async def start(self) -> None:
        """Connect and register; raises BrokerUnavailableError if the broker is unreachable."""
        await self.session.start()

    async def shutdown(self) -> None:
        await self.session.close()
