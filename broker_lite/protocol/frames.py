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

from broker_lite.errors import ProtocolError, ResponseCode

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "HEADER_SIZE",
    "PROTOCOL_VERSION",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "FrameKind",
    "RawFrame",
    "encode_frame",
    "parse_header",
]

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024
_HEADER = struct.Struct(">IBBHQ")
HEADER_SIZE = _HEADER.size  # 16
_AFTER_LENGTH = HEADER_SIZE - 4
_LENGTH = struct.Struct(">I")


class FrameKind(IntEnum):
    REQUEST = 0
    RESPONSE = 1
    ONEWAY = 2


_KINDS = (FrameKind.REQUEST, FrameKind.RESPONSE, FrameKind.ONEWAY)


class FrameError(ProtocolError, ValueError):
    """Bytes that are not a frame. ``fatal`` means the stream cannot be resynced.

    ``request_id`` and ``kind`` are set when the header was readable, so the
    receiver can still answer that request with an error frame; ``limit`` is
    the frame size limit a frame was over.
    """

    def __init__(self, message: str, *, fatal: bool, request_id: int | None = None,
                 kind: int | None = None, limit: int | None = None) -> None:
        super().__init__(message, code=(ResponseCode.BAD_FRAME if limit is None
                                        else ResponseCode.FRAME_TOO_LARGE))
        self.fatal = fatal
        self.request_id = request_id
        self.kind = kind
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Frame:
    kind: FrameKind
    code: int
    request_id: int
    body: bytes


def encode_frame(kind: FrameKind, code: int, request_id: int, body: bytes) -> bytes:
    return _HEADER.pack(_AFTER_LENGTH + len(body), PROTOCOL_VERSION, kind, code,
                        request_id) + body


def parse_header(header: bytes | bytearray, max_frame_size: int,
                 offset: int = 0) -> tuple[int, FrameKind, int, int]:
    """``(body_length, kind, code, request_id)`` from the 16 header bytes at ``offset``.

    Raises :class:`FrameError`: fatal when the length is impossible (the
    stream is lost), non-fatal for a bad version or kind once the length is
    known (the frame can be skipped and answered).
    """
    length, version, kind, code, request_id = _HEADER.unpack_from(header, offset)
    if length < _AFTER_LENGTH:
        raise FrameError(f"frame length {length} is shorter than a header", fatal=True)
    if length + 4 > max_frame_size:
        raise FrameError(
            f"frame of {length + 4} bytes is over the limit of {max_frame_size}",
            fatal=True, request_id=request_id, kind=kind, limit=max_frame_size,
        )
    if version != PROTOCOL_VERSION:
        raise FrameError(f"protocol version {version} is not supported (want "
                         f"{PROTOCOL_VERSION})", fatal=False, request_id=request_id, kind=kind)
    try:
        frame_kind = _KINDS[kind]
    except IndexError:
        raise FrameError(f"unknown frame kind {kind}", fatal=False, request_id=request_id,
                         kind=kind) from None
    return length - _AFTER_LENGTH, frame_kind, code, request_id


#: what :meth:`FrameDecoder.next` returns for a whole frame: kind, code, request id, body
RawFrame = tuple[FrameKind, int, int, bytes]


class FrameDecoder:
    """Incremental decoder: ``push`` bytes, take whole frames with ``next``.

    Bytes accumulate in one buffer; frames are cut out of it by offset, and
    the consumed part is dropped once per ``push``, not once per frame.
    ``feed`` (push, then every whole frame as a :class:`Frame`) suits tests
    and sync clients; the asyncio server and client use ``push``/``next``,
    which cost no object per frame beyond its body.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0  # where the first unread frame starts

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as frames."""
        return len(self._buf) - self._pos

    def push(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next(self) -> RawFrame | FrameError | None:
        """The next whole frame, a :class:`FrameError`, or ``None`` until more bytes come.

        After a fatal error the buffer is dropped: the stream cannot be
        resynced. A non-fatal one is returned once its whole frame is in,
        and that frame is skipped.
        """
        buf, pos = self._buf, self._pos
        if len(buf) - pos < HEADER_SIZE:
            return None
        length, version, kind, code, request_id = _HEADER.unpack_from(buf, pos)
        if (version != PROTOCOL_VERSION or kind > 2 or length < _AFTER_LENGTH
                or length + 4 > self.max_frame_size):
            return self._bad_frame(buf, pos)
        end = pos + 4 + length
        if len(buf) < end:
            return None
        self._pos = end
        return _KINDS[kind], code, request_id, bytes(buf[pos + HEADER_SIZE : end])

    def _bad_frame(self, buf: bytearray, pos: int) -> FrameError | None:
        """The error of the frame at ``pos`` (see :meth:`next`); ``None`` until it is whole."""
        try:
            parse_header(buf, self.max_frame_size, pos)
        except FrameError as exc:
            if exc.fatal:
                buf.clear()
                self._pos = 0
                return exc
            end = pos + _LENGTH.unpack_from(buf, pos)[0] + 4
            if len(buf) < end:
                return None
            self._pos = end
            return exc
        raise AssertionError("parse_header accepted a header next() refused")  # unreachable

    def feed(self, data: bytes) -> list[Frame | FrameError]:
        """Push ``data``; return every whole frame now buffered (and any errors)."""
        self.push(data)
        out: list[Frame | FrameError] = []
        while (item := self.next()) is not None:
            if isinstance(item, FrameError):
                out.append(item)
                if item.fatal:
                    break
            else:
                out.append(Frame(*item))
        return out
