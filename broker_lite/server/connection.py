"""One client connection of the native door: read frames, serve requests, write responses.

The reader loop reads whatever the socket has (up to 256 KiB at a time),
cuts whole frames out of it (:class:`~broker_lite.protocol.FrameDecoder`),
and decodes each body by request code. Requests with a synchronous form
(:data:`~broker_lite.server.handlers.INLINE`: sends, transaction ends, pulls
that need not wait, acks) are served right there, in order. In sync flush
mode their answer waits in the :class:`~broker_lite.serving.flushgate.FlushGate`
and goes out from its callback. Every other request, and a pull that long
polls, gets a task. At most ``max_inflight_per_connection`` requests wait
(in tasks or for an fsync) at once; beyond that the reader waits, which
pushes back on the client through TCP. Responses go out in any order,
matched to requests by id.

Responses are queued and handed to the transport together: at the end of
each loop turn, and every ``_FLUSH_EVERY`` responses while a burst of
requests is being served, so that the client can work on the first answers
while the broker serves the rest (one write per burst would make the two
sides take turns). Before reading more the reader waits while the socket's
send buffer is full: a client that does not read its answers is not read.
Every frame is queued whole from the loop thread, so frames never interleave.

The broker may also send requests on this connection: a check-back
(``CHECK_TRANSACTION_STATE``) to a producer. Those use the server's own id
space; their answers arrive as RESPONSE frames and complete a future.

Bad input answers with an error frame and keeps the connection (unknown
code, malformed body, bad version or kind), unless the stream cannot be
resynced (an impossible or oversized length): then the connection closes.
A connection whose first frame is not a valid HELLO is answered and closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from broker_lite.core.acl import Account
from broker_lite.core.model import CheckRequest
from broker_lite.errors import BrokerError, ResponseCode
from broker_lite.protocol import (
    HEADER_SIZE,
    REQUEST_TYPES,
    BodyError,
    Frame,
    FrameDecoder,
    FrameError,
    FrameKind,
    RequestCode,
    decode,
    encode,
    encode_frame,
)
from broker_lite.protocol import messages as m
from broker_lite.server.checkback import ask_producer
from broker_lite.server.handlers import HANDLERS, INLINE, Handler, InlineHandler
from broker_lite.server.hello import authenticate, welcome
from broker_lite.serving.context import ServerContext
from broker_lite.serving.durability import flush_future, flush_outcome

__all__ = ["Connection"]

log = logging.getLogger("broker_lite.server")

#: bytes asked of the socket per read
_READ_SIZE = 256 * 1024
#: while serving a burst of requests, hand the responses to the transport this often
_FLUSH_EVERY = 16


class _Closing(Exception):
    """The connection must end now (any error frame has been written)."""


class Connection:
    """Serves one socket; also the core's ``Channel`` for check-backs to a producer."""

    def __init__(self, ctx: ServerContext, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, *,
                 handlers: Mapping[int, Handler] = HANDLERS) -> None:
        self._ctx = ctx
        self._handlers = handlers
        self._reader = reader
        self._writer = writer
        peer = writer.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_id = ""
        #: the access key the HELLO was signed with (``None`` without an ACL)
        self._access_key: str | None = None
        self._alive = True
        self._closed = False
        self._registered = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._max_tasks = ctx.config.max_inflight_per_connection
        #: requests answered once their records are durable (sync flush), not yet answered
        self._flush_waits = 0
        self._room: asyncio.Future[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._out: list[bytes] = []
        self._frames = FrameDecoder(ctx.config.max_frame_size)
        self._sync_flush = ctx.broker.config.store.flush == "sync"
        # the synchronous forms usable here: only where the default handler is in place
        self._inline: dict[int, InlineHandler] = {
            code: now for code, (default, now) in INLINE.items() if handlers.get(code) is default}

    def __repr__(self) -> str:
        return f"<Connection {self.remote_address} client_id={self.client_id!r}>"

    @property
    def account(self) -> Account | None:
        """The account as the ACL has it now (a reload applies to open connections)."""
        acl = self._ctx.acl
        if acl is None or self._access_key is None:
            return None
        return acl.current(self._access_key)

    # -- Channel (the broker core calls these, possibly from other threads) ---------

    def may_check(self, producer_group: str, topic: str) -> bool:
        account = self.account
        return account is None or account.may_produce(producer_group, topic)

    def is_alive(self) -> bool:
        return self._alive

    def send_check(self, request: CheckRequest) -> None:
        """Ask the producer about a transaction; fire-and-forget, from any thread."""
        if self._alive:
            self._ctx.call_soon_threadsafe(self._start_check, request)

    def mark_registered(self) -> None:
        self._registered = True

    def _start_check(self, request: CheckRequest) -> None:
        if self._alive:
            self._ctx.spawn(ask_producer(self._ctx, self, request),
                            name=f"check-{request.transaction_id}")

    async def request(self, code: RequestCode, body: Any, timeout: float) -> tuple[int, bytes]:
        """Send a server-initiated request; return the response's ``(code, body)``.

        Raises ``TimeoutError`` without an answer in time, ``ConnectionError``
        when the connection is (or becomes) closed.
        """
        if not self._alive:
            raise ConnectionError("connection closed")
        request_id = next(self._ids)
        future: asyncio.Future[tuple[int, bytes]] = self._ctx.loop.create_future()
        self._pending[request_id] = future
        try:
            await self._write(FrameKind.REQUEST, code, request_id, encode(body))
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(request_id, None)

    # -- the connection's life ----------------------------------------------------------

    async def serve(self) -> None:
        """Run the connection to its end; never raises (a bad client only hurts itself)."""
        try:
            await self._handshake()
            await self._serve_frames()
        except (_Closing, asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:
            log.exception("connection %s failed", self.remote_address)
        finally:
            await self.close()

    async def _serve_frames(self) -> None:
        """Serve every whole frame buffered, then read more; until EOF or closing."""
        frames = self._frames
        while self._alive:
            item = frames.next()
            if item is None:
                self._flush_out()
                await self._drain()
                data = await self._reader.read(_READ_SIZE)
                if not data:
                    return  # EOF
                frames.push(data)
            elif isinstance(item, FrameError):
                await self._bad_frame(item)
            else:
                self._dispatch(*item)
                if self._busy():
                    await self._wait_for_room()

    async def close(self) -> None:
        """Stop serving: cancel requests in flight, fail check-backs, tell the broker."""
        if self._closed:
            return
        self._closed = True
        self._alive = False
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)
        for task in list(self._tasks):
            task.cancel()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("connection closed"))
        self._pending.clear()
        if self._registered:
            try:
                self._ctx.broker.channel_closed(self)
            except Exception:
                log.exception("broker.channel_closed failed for %s", self.remote_address)
        self._flush_out()  # error frames queued just before closing still go out
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        log.debug("closed %r", self)

    # -- reading ---------------------------------------------------------------------

    async def _next_frame(self) -> Frame | None:
        """The next whole frame; ``None`` when a bad frame was skipped and answered."""
        frames = self._frames
        while (item := frames.next()) is None:
            data = await self._reader.read(_READ_SIZE)
            if not data:
                raise asyncio.IncompleteReadError(b"", HEADER_SIZE)
            frames.push(data)
        if isinstance(item, FrameError):
            await self._bad_frame(item)
            return None
        return Frame(*item)

    async def _bad_frame(self, exc: FrameError) -> None:
        rid = exc.request_id
        if exc.fatal:
            log.warning("closing %s: %s", self.remote_address, exc)
            if rid is not None:  # oversized: answer, and never read the body
                await self._write_error(rid, ResponseCode.FRAME_TOO_LARGE, str(exc))
            raise _Closing
        log.info("bad frame from %s: %s", self.remote_address, exc)
        if rid is not None and exc.kind != FrameKind.ONEWAY:
            await self._write_error(rid, ResponseCode.BAD_FRAME, str(exc))

    async def _handshake(self) -> None:
        """The first frame must be a valid HELLO; otherwise answer with an error and close."""
        try:
            frame = await asyncio.wait_for(self._next_frame(), self._ctx.config.hello_timeout)
        except TimeoutError:
            log.info("closing %s: no HELLO within %gs", self.remote_address,
                     self._ctx.config.hello_timeout)
            raise _Closing from None
        if frame is None:  # a bad first frame was answered; there is no session to keep
            raise _Closing
        kind, code, rid, body = frame.kind, frame.code, frame.request_id, frame.body
        if kind != FrameKind.REQUEST or code != RequestCode.HELLO:
            refuse = (ResponseCode.UNAUTHORIZED if self._ctx.acl is not None
                      else ResponseCode.MALFORMED_REQUEST)
            await self._write_error(rid, refuse, f"the first frame must be a HELLO request, "
                                                 f"not {kind.name} with code {code}")
            raise _Closing
        try:
            hello = decode(body, m.HelloRequest)
            account = authenticate(self._ctx, hello)
        except BodyError as exc:
            await self._write_error(rid, ResponseCode.MALFORMED_REQUEST, str(exc))
            raise _Closing from None
        except BrokerError as exc:
            log.warning("refused HELLO from %s: %s", self.remote_address, exc)
            await self._write_error(rid, exc.code, str(exc), retriable=exc.retriable)
            raise _Closing from None
        self.client_id = hello.client_id
        self._access_key = account.access_key if account is not None else None
        log.debug("HELLO from %s as %r", self.remote_address, self.client_id)
        await self._write(FrameKind.RESPONSE, ResponseCode.SUCCESS, rid,
                          encode(welcome(self._ctx)))

    # -- dispatching -------------------------------------------------------------------

    def _dispatch(self, kind: FrameKind, code: int, rid: int, body: bytes) -> None:
        """Serve one frame: inline when it has a synchronous form, else in a task."""
        if kind is FrameKind.RESPONSE:
            future = self._pending.pop(rid, None)
            if future is None or future.done():
                log.info("%s answered unknown or expired request id %d", self.remote_address, rid)
            else:
                future.set_result((code, body))
            return
        oneway = kind is FrameKind.ONEWAY
        handler = self._handlers.get(code)
        body_type = REQUEST_TYPES.get(code)
        if handler is None or body_type is None:
            what = ("HELLO was already received on this connection" if code == RequestCode.HELLO
                    else f"request code {code} is not supported by this broker")
            error = (ResponseCode.MALFORMED_REQUEST if code == RequestCode.HELLO
                     else ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
            if not oneway:
                self._queue_error(rid, error, what)
            return
        try:
            request = decode(body, body_type)
        except BodyError as exc:
            if not oneway:
                self._queue_error(rid, ResponseCode.MALFORMED_REQUEST,
                                  f"{RequestCode(code).name}: {exc}")
            return
        inline = self._inline.get(code)
        if inline is not None:
            try:
                answer = inline(self._ctx, self, request)
            except Exception as exc:
                self._failed(code, rid, exc, oneway)
                return
            if answer is not None:
                response, end_offset = answer
                if oneway:
                    return
                if end_offset < 0 or not self._sync_flush:  # nothing to wait for
                    self._queue(FrameKind.RESPONSE, ResponseCode.SUCCESS, rid, encode(response))
                    return
                durable = flush_future(self._ctx, end_offset)
                if durable is None or durable.done():
                    self._answer_flushed(code, rid, response, end_offset, durable)
                else:  # sync flush: answer from the gate's callback, no task
                    self._flush_waits += 1
                    durable.add_done_callback(functools.partial(
                        self._flushed, code, rid, response, end_offset))
                return
        self._spawn(self._serve_request(handler, code, rid, request, oneway))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._ctx.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._room_made()

    def _busy(self) -> bool:
        """As many requests as allowed are being served (in tasks or waiting for fsync)."""
        return len(self._tasks) + self._flush_waits >= self._max_tasks

    def _room_made(self) -> None:
        room = self._room
        if room is not None and not self._busy():
            self._room = None
            if not room.done():
                room.set_result(None)

    async def _wait_for_room(self) -> None:
        """Wait until fewer than ``max_inflight_per_connection`` requests are being served."""
        while self._busy() and self._alive:
            if self._room is None:
                self._room = self._ctx.loop.create_future()
            await self._room

    def _answer_flushed(self, code: int, rid: int, response: Any, end_offset: int,
                        durable: asyncio.Future[BaseException | None] | None) -> None:
        """Answer: ``response`` if ``durable`` says ``end_offset`` is durable (or there is
        nothing to wait for), else the error saying why not."""
        error = None
        if durable is not None:
            error = (flush_outcome(self._ctx, end_offset, durable.result())
                     if not durable.cancelled() else None)
        if error is not None:
            self._failed(code, rid, error, oneway=False)
        else:
            self._queue(FrameKind.RESPONSE, ResponseCode.SUCCESS, rid, encode(response))

    def _flushed(self, code: int, rid: int, response: Any, end_offset: int,
                 durable: asyncio.Future[BaseException | None]) -> None:
        """The gate's callback for a request answered once durable."""
        self._flush_waits -= 1
        self._room_made()
        if self._alive:
            self._answer_flushed(code, rid, response, end_offset, durable)

    async def _serve_request(self, handler: Handler, code: int, rid: int, request: Any,
                             oneway: bool) -> None:
        try:
            response = await handler(self._ctx, self, request)
        except Exception as exc:
            self._failed(code, rid, exc, oneway)
            return
        if not oneway:
            await self._write(FrameKind.RESPONSE, ResponseCode.SUCCESS, rid, encode(response))

    def _failed(self, code: int, rid: int, exc: Exception, oneway: bool) -> None:
        """Log a request that raised; answer (unless one-way) with its code for a
        BrokerError, else SYSTEM_ERROR (the details stay in the log)."""
        name = RequestCode(code).name
        if isinstance(exc, BrokerError):
            log.debug("%s %d from %s failed: %s", name, rid, self.remote_address, exc)
            if not oneway:
                self._queue_error(rid, exc.code, str(exc), retriable=exc.retriable)
            return
        log.error("%s %d from %s failed", name, rid, self.remote_address, exc_info=exc)
        if not oneway:
            self._queue_error(rid, ResponseCode.SYSTEM_ERROR,
                              f"internal error serving {name}; see the broker log")

    # -- writing ---------------------------------------------------------------------

    def _queue(self, kind: FrameKind, code: int, rid: int, body: bytes) -> None:
        """Queue one whole frame (frames never interleave); it goes out with the others
        queued this loop turn, in one ``writelines``, or sooner in a long burst."""
        out = self._out
        out.append(encode_frame(kind, code, rid, body))
        if len(out) == 1:
            self._ctx.loop.call_soon(self._flush_out)
        elif len(out) >= _FLUSH_EVERY:
            self._flush_out()

    async def _write(self, kind: FrameKind, code: int, rid: int, body: bytes) -> None:
        """Queue one frame, then respect backpressure (for requests served in a task)."""
        if self._writer.is_closing():
            return
        self._queue(kind, code, rid, body)
        await self._drain()

    async def _drain(self) -> None:
        """Wait while the transport's buffer is over its high-water mark."""
        try:
            await self._writer.drain()
        except ConnectionError:
            self._alive = False

    def _flush_out(self) -> None:
        frames, self._out = self._out, []
        if frames and not self._writer.is_closing():
            self._writer.writelines(frames)

    def _queue_error(self, rid: int, code: int, message: str, *,
                     retriable: bool = False) -> None:
        if self._writer.is_closing():
            return
        body = encode(m.ErrorBody(message=message, retriable=retriable))
        self._queue(FrameKind.RESPONSE, code, rid, body)

    async def _write_error(self, rid: int, code: int, message: str, *,
                           retriable: bool = False) -> None:
        body = encode(m.ErrorBody(message=message, retriable=retriable))
        await self._write(FrameKind.RESPONSE, code, rid, body)
