"""One TCP connection speaking the native protocol, on asyncio.

A :class:`Connection` multiplexes requests over one socket: each request gets
an id and a future, any number may be in flight (pipelining), and a reader
task resolves them as responses arrive, in whatever order. The reader takes
whatever the socket has and cuts whole frames out of it
(:class:`~broker_lite.protocol.FrameDecoder`). Requests the broker sends the
other way (``CHECK_TRANSACTION_STATE`` on a producer's connection) go to a
handler, each in its own task, and are answered with a ``RESPONSE`` frame
echoing their id.

Frames written in one loop turn go to the socket together, in one
``writelines``; a long burst goes out every ``_FLUSH_EVERY`` frames, so the
broker starts on the first requests while the rest are still being made.

When the socket breaks, every pending request fails with
:class:`BrokerUnavailableError`; reconnecting is the job of
:class:`broker_lite.client.session.Session`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from broker_lite.client.errors import BrokerUnavailableError
from broker_lite.errors import (
    BrokerError,
    ProtocolError,
    RequestTimeoutError,
    ResponseCode,
    error_for_code,
)
from broker_lite.protocol import (
    HEADER_SIZE,
    BodyError,
    FrameDecoder,
    FrameError,
    FrameKind,
    decode,
    encode,
    encode_frame,
)
from broker_lite.protocol import messages as m

__all__ = ["Connection", "RequestHandler"]

log = logging.getLogger("broker_lite.client.connection")

T = TypeVar("T")

#: answers a request the broker sent: ``(code, body)`` -> the response body
RequestHandler = Callable[[int, bytes], Awaitable[Any]]

#: how often deadlines are checked: a request times out up to this late
_SWEEP_INTERVAL = 0.05
#: unsent bytes in the socket's buffer above which a request waits before going on
_HIGH_WATER = 4 << 20
#: bytes asked of the socket per read
_READ_SIZE = 256 * 1024
#: in a burst of requests, hand them to the transport at least this often
_FLUSH_EVERY = 16


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Any]
    response_type: type[Any]
    deadline: float
    code: int
    timeout: float


class Connection:
    """A live connection; build it with :meth:`open`."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        server: str,
        max_frame_size: int,
        handler: RequestHandler | None = None,
    ) -> None:
        self.server = server
        self.max_frame_size = max_frame_size
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._loop = asyncio.get_running_loop()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed: asyncio.Future[BrokerError] = self._loop.create_future()
        #: frames written this loop turn; flushed together in one ``writelines``
        self._out: list[bytes] = []
        self._sweeper: asyncio.TimerHandle | None = None
        self._read_task = asyncio.create_task(self._read_loop(), name=f"read {server}")

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        server: str,
        connect_timeout: float,
        max_frame_size: int,
        handler: RequestHandler | None = None,
    ) -> Connection:
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(host, port)
        except TimeoutError as exc:
            raise BrokerUnavailableError(
                f"cannot connect to broker at {server}: no answer within {connect_timeout}s",
                server=server) from exc
        except OSError as exc:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            raise BrokerUnavailableError(f"cannot connect to broker at {server}: {why}",
                                         server=server) from exc
        return cls(reader, writer, server=server, max_frame_size=max_frame_size, handler=handler)

    # -- state -----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed.done()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def wait_closed(self) -> BrokerError:
        """Wait until the connection is gone; returns why."""
        return await asyncio.shield(self._closed)

    async def close(self) -> None:
        """Close the socket; pending requests fail with BrokerUnavailableError."""
        self._shut(BrokerUnavailableError(f"connection to {self.server} was closed by the client",
                                          server=self.server))
        self._read_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._read_task
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await self._writer.wait_closed()

    # -- requests --------------------------------------------------------------

    async def request(self, code: int, body: Any, response_type: type[T], timeout: float) -> T:
        """Send one request and wait for its response (decoded as ``response_type``).

        Raises the broker's error mapped by ``error_for_code``,
        :class:`RequestTimeoutError` after ``timeout`` seconds, or
        :class:`BrokerUnavailableError` if the connection breaks first.
        """
        if self._closed.done():
            raise self._error()
        request_id = next(self._ids)
        frame = self._frame(FrameKind.REQUEST, code, request_id, encode(body))
        future: asyncio.Future[T] = self._loop.create_future()
        self._pending[request_id] = _Pending(future, response_type,
                                             self._loop.time() + timeout, code, timeout)
        self._write(frame)
        if self._sweeper is None:
            self._sweeper = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)
        try:
            if self._writer.transport.get_write_buffer_size() > _HIGH_WATER:
                await self.drain()  # the broker reads slower than we write: wait for it
            return await future
        finally:
            self._pending.pop(request_id, None)

    def send_oneway(self, code: int, body: Any) -> None:
        """Write a one-way request: the broker never answers it."""
        if self._closed.done():
            raise self._error()
        self._write(self._frame(FrameKind.ONEWAY, code, next(self._ids), encode(body)))

    async def drain(self) -> None:
        """Hand what is buffered to the socket; wait while its buffer is over the high mark."""
        self._flush()
        if not self._closed.done():
            with contextlib.suppress(ConnectionError, OSError):
                await self._writer.drain()

    def _frame(self, kind: FrameKind, code: int, request_id: int, body: bytes) -> bytes:
        size = HEADER_SIZE + len(body)
        if size > self.max_frame_size:
            raise ProtocolError(
                f"request of {size} bytes is over the frame limit of {self.max_frame_size} "
                f"bytes (send fewer or smaller messages)", code=ResponseCode.FRAME_TOO_LARGE)
        return encode_frame(kind, code, request_id, body)

    def _write(self, frame: bytes) -> None:
        """Queue a frame; the frames of one loop turn go out in one ``writelines`` (a
        long burst every ``_FLUSH_EVERY`` frames)."""
        out = self._out
        out.append(frame)
        if len(out) == 1:
            self._loop.call_soon(self._flush)
        elif len(out) >= _FLUSH_EVERY:
            self._flush()

    def _flush(self) -> None:
        out, self._out = self._out, []
        if not out or self._closed.done():
            return
        try:
            self._writer.writelines(out)
        except (ConnectionError, OSError, RuntimeError) as exc:
            self._shut(BrokerUnavailableError(
                f"connection to broker at {self.server} failed: {exc}", server=self.server))

    def _sweep(self) -> None:
        """Fail the requests whose deadline passed (one timer for all of them)."""
        self._sweeper = None
        if self._closed.done() or not self._pending:
            return
        now = self._loop.time()
        for entry in list(self._pending.values()):
            if entry.deadline <= now and not entry.future.done():
                entry.future.set_exception(RequestTimeoutError(
                    f"no answer from broker at {self.server} within {entry.timeout:.3g}s "
                    f"(request code {entry.code})"))
        self._sweeper = self._loop.call_later(_SWEEP_INTERVAL, self._sweep)

    # -- reading ---------------------------------------------------------------

    async def _read_loop(self) -> None:
        reason: BrokerError = BrokerUnavailableError(
            f"connection to {self.server} failed", server=self.server)
        frames = FrameDecoder(self.max_frame_size)
        read = self._reader.read
        try:
            while True:
                item = frames.next()
                if item is None:
                    data = await read(_READ_SIZE)
                    if not data:
                        raise asyncio.IncompleteReadError(b"", HEADER_SIZE)
                    frames.max_frame_size = self.max_frame_size  # lowered after HELLO
                    frames.push(data)
                elif isinstance(item, FrameError):
                    if item.fatal:
                        raise ProtocolError(f"broker at {self.server} sent a bad frame: {item}",
                                            code=ResponseCode.BAD_FRAME) from item
                    self._on_bad_frame(item)
                else:
                    kind, code, request_id, body = item
                    if kind is FrameKind.RESPONSE:
                        self._on_response(code, request_id, body)
                    else:
                        self._spawn(self._answer(kind, code, request_id, body))
        except asyncio.CancelledError:
            reason = BrokerUnavailableError(f"connection to {self.server} was closed",
                                            server=self.server)
            raise
        except asyncio.IncompleteReadError:
            reason = BrokerUnavailableError(
                f"broker at {self.server} closed the connection", server=self.server)
        except (ConnectionError, OSError) as exc:
            reason = BrokerUnavailableError(
                f"connection to broker at {self.server} broke: {exc}", server=self.server)
        except ProtocolError as exc:
            log.error("%s", exc)
            reason = BrokerUnavailableError(str(exc), server=self.server)
        except Exception as exc:
            log.exception("reader of the connection to %s failed", self.server)
            reason = BrokerUnavailableError(f"connection to {self.server} failed: {exc}",
                                            server=self.server)
        finally:
            self._shut(reason)
            self._writer.close()

    def _on_response(self, code: int, request_id: int, body: bytes) -> None:
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return  # timed out or cancelled already
        future, response_type = entry.future, entry.response_type
        if future.done():
            return
        try:
            if code == ResponseCode.SUCCESS:
                future.set_result(decode(body, response_type))
            else:
                error = decode(body, m.ErrorBody) if body else m.ErrorBody(message="")
                future.set_exception(error_for_code(
                    code, error.message or f"broker answered code {code}",
                    retriable=error.retriable))
        except BodyError as exc:
            future.set_exception(ProtocolError(
                f"broker at {self.server} sent a malformed response: {exc}",
                code=ResponseCode.MALFORMED_REQUEST))

    def _on_bad_frame(self, exc: FrameError) -> None:
        if exc.kind == FrameKind.RESPONSE and exc.request_id is not None:
            entry = self._pending.pop(exc.request_id, None)
            if entry is not None and not entry.future.done():
                entry.future.set_exception(ProtocolError(f"unreadable response: {exc}"))
        else:
            log.warning("skipped an unreadable frame from %s: %s", self.server, exc)

    async def _answer(self, kind: FrameKind, code: int, request_id: int, body: bytes) -> None:
        """Run the handler for a request the broker sent; answer unless it was one-way."""
        response_code: int = ResponseCode.SUCCESS
        payload: Any
        try:
            if self._handler is None:
                raise ProtocolError(f"this client does not serve request code {code}",
                                    code=ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
            payload = await self._handler(code, body)
        except BrokerError as exc:
            response_code = exc.code
            payload = m.ErrorBody(message=str(exc), retriable=exc.retriable)
        except Exception as exc:
            log.exception("handler for request code %d failed", code)
            response_code = ResponseCode.SYSTEM_ERROR
            payload = m.ErrorBody(message=f"{type(exc).__name__}: {exc}")
        if kind is FrameKind.ONEWAY or self._closed.done():
            return
        try:
            frame = self._frame(FrameKind.RESPONSE, response_code, request_id, encode(payload))
        except BrokerError as exc:
            frame = self._frame(FrameKind.RESPONSE, exc.code, request_id,
                                encode(m.ErrorBody(message=str(exc))))
        self._write(frame)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _shut(self, reason: BrokerError) -> None:
        if self._closed.done():
            return
        self._closed.set_result(reason)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            if not entry.future.done():
                entry.future.set_exception(self._error())

    def _error(self) -> BrokerUnavailableError:
        """A fresh exception (one per raise, so tracebacks do not pile up) saying why."""
        reason = self._closed.result() if self._closed.done() else None
        return BrokerUnavailableError(str(reason or f"connection to {self.server} is closed"),
                                      server=self.server)
