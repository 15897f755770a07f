"""A tiny blocking native-protocol client for the server tests, built on broker_lite.protocol.

It speaks raw frames over a socket so tests can send anything, valid or not.
The real client (``broker_lite.client``) is tested elsewhere; these tests must
not depend on it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from broker_lite.protocol import (
    RESPONSE_TYPES,
    Frame,
    FrameDecoder,
    FrameError,
    FrameKind,
    RequestCode,
    ResponseCode,
    decode,
    encode,
    encode_frame,
)
from broker_lite.protocol import messages as m
from broker_lite.protocol.signing import sign_hello
from tests import support
from tests.support import wait_until

T = TypeVar("T")

IO_TIMEOUT = 10.0


class ErrorReply(Exception):
    """The broker answered with an error code."""

    def __init__(self, code: int, body: m.ErrorBody) -> None:
        super().__init__(f"{_name(code)}: {body.message}")
        self.code = code
        self.body = body


def _name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def address(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host.strip("[]"), int(port)


def signed_hello(client_id: str, access_key: str, secret: str, *,
                 timestamp_ms: int | None = None, nonce: str | None = None) -> m.HelloRequest:
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    nonce = os.urandom(8).hex() if nonce is None else nonce
    return m.HelloRequest(client_id=client_id, access_key=access_key, timestamp_ms=ts,
                          nonce=nonce, signature=sign_hello(secret, client_id, ts, nonce))


class WireClient:
    """One socket to the broker. Not thread-safe: one thread per client."""

    def __init__(self, host_port: str, *, client_id: str = "test-client",
                 hello: m.HelloRequest | bool | None = True, timeout: float = IO_TIMEOUT) -> None:
        self.client_id = client_id
        self.sock = socket.create_connection(address(host_port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder(max_frame_size=1 << 30)
        self._frames: deque[Frame | FrameError] = deque()
        self._ids = itertools.count(1)
        #: server-initiated requests (check-backs) seen while waiting for responses
        self.server_requests: deque[Frame] = deque()
        self._responses: dict[int, Frame] = {}
        if hello is True:
            self.call(RequestCode.HELLO, m.HelloRequest(client_id=client_id))
        elif isinstance(hello, m.HelloRequest):
            self.call(RequestCode.HELLO, hello)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw frames ------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, kind: FrameKind, code: int, body: bytes,
                   request_id: int | None = None) -> int:
        rid = next(self._ids) if request_id is None else request_id
        self.sock.sendall(encode_frame(kind, code, rid, body))
        return rid

    def read_frame(self) -> Frame | None:
        """The next frame from the broker; ``None`` at EOF (the broker closed)."""
        while not self._frames:
            try:
                data = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self._frames.extend(self._decoder.feed(data))
        item = self._frames.popleft()
        if isinstance(item, FrameError):
            raise item
        return item

    def response_to(self, rid: int) -> Frame:
        """Read until the response to ``rid``; other frames on the way are kept."""
        while rid not in self._responses:
            frame = self.read_frame()
            if frame is None:
                raise ConnectionError(f"broker closed the connection before answering {rid}")
            if frame.kind == FrameKind.RESPONSE:
                self._responses[frame.request_id] = frame
            else:
                self.server_requests.append(frame)
        return self._responses.pop(rid)

    def closed_by_peer(self) -> bool:
        """True once the broker has closed the connection (reads to EOF)."""
        while True:
            frame = self.read_frame()
            if frame is None:
                return True
            if frame.kind != FrameKind.RESPONSE:
                self.server_requests.append(frame)

    # -- typed requests ------------------------------------------------------------

    def start(self, code: RequestCode, body: Any) -> int:
        return self.send_frame(FrameKind.REQUEST, code, encode(body))

    def finish(self, code: RequestCode, rid: int) -> Any:
        frame = self.response_to(rid)
        if frame.code != ResponseCode.SUCCESS:
            raise ErrorReply(frame.code, decode(frame.body, m.ErrorBody))
        return decode(frame.body, RESPONSE_TYPES[code])

    def call(self, code: RequestCode, body: Any) -> Any:
        return self.finish(code, self.start(code, body))

    def error_of(self, code: RequestCode, body: Any) -> ErrorReply:
        try:
            result = self.call(code, body)
        except ErrorReply as exc:
            return exc
        raise AssertionError(f"{code.name} succeeded unexpectedly: {result!r}")

    def send(self, topic: str, body: bytes, *, group: str = "pg", **fields: Any) -> m.SendResult:
        message = m.WireMessage(topic=topic, body=body, **fields)
        result: m.SendResult = self.call(RequestCode.SEND_MESSAGE,
                                         m.SendRequest(producer_group=group, message=message))
        return result

    def pull(self, topic: str, queue_id: int = 0, offset: int = 0, *, group: str = "cg",
             **fields: Any) -> m.PullResponse:
        result: m.PullResponse = self.call(RequestCode.PULL_MESSAGE, m.PullRequest(
            group=group, topic=topic, queue_id=queue_id, offset=offset, **fields))
        return result

    def create_topic(self, topic: str, queues: int = 1) -> m.TopicInfo:
        info: m.TopicInfo = self.call(RequestCode.TOPIC_CREATE,
                                      m.TopicCreateRequest(topic=topic, queues=queues))
        return info


class HealthyClient(threading.Thread):
    """Keeps asking the broker for its topic list on its own connection, counting answers.

    Tests that feed the broker garbage on another connection check that this
    client keeps getting answers (``wait_for_more``) and never saw an error.
    """

    def __init__(self, host_port: str) -> None:
        super().__init__(name="healthy-client", daemon=True)
        self._client = WireClient(host_port, client_id="healthy")
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._answers = 0
        self.error: BaseException | None = None

    @property
    def answers(self) -> int:
        with self._lock:
            return self._answers

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                self._client.call(RequestCode.TOPIC_LIST, m.Empty())
                with self._lock:
                    self._answers += 1
        except BaseException as exc:
            self.error = exc

    def still_answered(self, after: int) -> bool:
        if self.error is not None:
            raise AssertionError(f"the healthy client failed: {self.error!r}")
        return self.answers > after + 2

    @contextlib.contextmanager
    def still_served(self) -> Iterator[None]:
        """Around garbage sent on another connection: afterwards this client got answers."""
        before = self.answers
        yield
        wait_until(lambda: self.still_answered(before), timeout=10)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(IO_TIMEOUT)
        self._client.close()
        if self.error is not None:
            raise AssertionError(f"the healthy client failed: {self.error!r}")


def serve_command() -> list[str]:
    """The ``broker-lite`` command, as argv (``serve ...`` is appended)."""
    return [sys.executable, "-m", "broker_lite"]


StartBroker = support.StartBroker


def run_args(args: Sequence[str]) -> list[str]:
    """``serve ARGS``, topics auto-created (tests send to topics they never create)."""
    return [*serve_command(), "serve", "--auto-create-topics", *args]
