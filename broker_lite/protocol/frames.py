"""Framing of the native protocol: plain functions, no I/O.

Every frame is::

    0   4  length of everything after this field (big-endian)
    4   1  version (1)
    5   1  kind: 0 request, 1 response, 2 one-way request (no response)
    6   2  code: a RequestCode for requests, a ResponseCode for responses
    8   8  request id; a response echoes the id of its request
    16  .. body: MessagePack (see messages.py)

Either side may send requests: the broker's check-back to a producer is a
request on the producer's own connection. Ids are per direction, so the two
never collide. Many requests may be in flight on one connection; responses
may come back in any order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "FrameKind",
    "encode_frame",
    "parse_header",
]

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024
_HEADER = struct.Struct(">IBBHQ")
HEADER_SIZE = _HEADER.size  # 16
_AFTER_LENGTH = HEADER_SIZE - 4


class FrameKind(IntEnum):
    REQUEST = 0
    RESPONSE = 1
    ONEWAY = 2


class FrameError(ValueError):
    """Bytes that are not a frame. ``fatal`` means the stream cannot be resynced.

    ``request_id`` and ``code`` are set when the header was readable, so the
    receiver can still answer that request with an error frame.
    """

    def __init__(self, message: str, *, fatal: bool, request_id: int | None = None,
                 kind: int | None = None) -> None:
        super().__init__(message)
        self.fatal = fatal
        self.request_id = request_id
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Frame:
    kind: FrameKind
    code: int
    request_id: int
    body: bytes


def encode_frame(kind: FrameKind, code: int, request_id: int, body: bytes) -> bytes:
    return _HEADER.pack(_AFTER_LENGTH + len(body), PROTOCOL_VERSION, kind, code,
                        request_id) + body


def parse_header(header: bytes, max_frame_size: int) -> tuple[int, FrameKind, int, int]:
    """``(body_length, kind, code, request_id)`` from 16 header bytes.

    Raises :class:`FrameError`: fatal when the length is impossible (the
    stream is lost), non-fatal for a bad version or kind once the length is
    known (the frame can be skipped and answered).
    """
    length, version, kind, code, request_id = _HEADER.unpack(header)
    if length < _AFTER_LENGTH:
        raise FrameError(f"frame length {length} is shorter than a header", fatal=True)
    body_length = length - _AFTER_LENGTH
    if length + 4 > max_frame_size:
        raise FrameError(
            f"frame of {length + 4} bytes is over the limit of {max_frame_size}",
            fatal=True, request_id=request_id, kind=kind,
        )
    if version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {version} is not supported (want "
                         f"{PROTOCOL_VERSION})", fatal=False, request_id=request_id, kind=kind)
    if kind not in (0, 1, 2):
        raise FrameError(f"unknown frame kind {kind}", fatal=False, request_id=request_id,
                         kind=kind)
    return body_length, FrameKind(kind), code, request_id


class FrameDecoder:
    """Incremental decoder: ``feed`` bytes, get whole frames (for tests and sync clients)."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame | FrameError]:
        self._buf += data
        out: list[Frame | FrameError] = []
        while len(self._buf) >= HEADER_SIZE:
            try:
                body_length, kind, code, request_id = parse_header(
                    bytes(self._buf[:HEADER_SIZE]), self.max_frame_size)
            except FrameError as exc:
                if exc.fatal:
                    out.append(exc)
                    self._buf.clear()
                    return out
                length = _HEADER.unpack_from(self._buf)[0] + 4
                if len(self._buf) < length:
                    return out
                del self._buf[:length]
                out.append(exc)
                continue
            end = HEADER_SIZE + body_length
            if len(self._buf) < end:
                break
            out.append(Frame(kind, code, request_id, bytes(self._buf[HEADER_SIZE:end])))
            del self._buf[:end]
        return out
