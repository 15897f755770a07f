"""The server's frame reader, fed bytes through a real asyncio.StreamReader."""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from broker_lite.protocol import (
    HEADER_SIZE,
    Frame,
    FrameError,
    FrameKind,
    RequestCode,
    encode,
    encode_frame,
)
from broker_lite.protocol import messages as m
from broker_lite.server.connection import read_frame

LIMIT = 64 * 1024


def in_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test body in a fresh event loop (no asyncio plugin needed)."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


def _reader(*chunks: bytes, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


def _bytewise(data: bytes) -> list[bytes]:
    return [data[i:i + 1] for i in range(len(data))]


def _header(length: int, version: int = 1, kind: int = 0, code: int = 10, rid: int = 7) -> bytes:
    return struct.pack(">IBBHQ", length, version, kind, code, rid)


@pytest.mark.timeout(10)
@in_loop
async def test_frames_read_whole_even_one_byte_at_a_time() -> None:
    hello = encode(m.HelloRequest(client_id="c1"))
    data = (encode_frame(FrameKind.REQUEST, RequestCode.HELLO, 1, hello)
            + encode_frame(FrameKind.ONEWAY, RequestCode.HEARTBEAT, 2, b"")
            + encode_frame(FrameKind.RESPONSE, 0, 3, b"x" * 1000))
    reader = _reader(*_bytewise(data))
    frames = [await read_frame(reader, LIMIT) for _ in range(3)]
    assert frames == [
        Frame(FrameKind.REQUEST, RequestCode.HELLO, 1, hello),
        Frame(FrameKind.ONEWAY, RequestCode.HEARTBEAT, 2, b""),
        Frame(FrameKind.RESPONSE, 0, 3, b"x" * 1000),
    ]
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader, LIMIT)


@pytest.mark.timeout(10)
@in_loop
async def test_frame_split_across_feeds_waits_for_the_rest() -> None:
    data = encode_frame(FrameKind.REQUEST, RequestCode.SEND_MESSAGE, 9, b"b" * 100)
    reader = _reader(data[:20], eof=False)
    pending = asyncio.ensure_future(read_frame(reader, LIMIT))
    # the read must still be waiting for the other 80 bytes after a generous deadline
    done, _ = await asyncio.wait({pending}, timeout=0.2)
    assert not done
    reader.feed_data(data[20:])
    frame = await asyncio.wait_for(pending, 5)
    assert frame.body == b"b" * 100 and frame.request_id == 9


@pytest.mark.timeout(10)
@in_loop
async def test_bad_version_skips_the_body_and_keeps_the_stream() -> None:
    body = b"z" * 33
    bad = _header(HEADER_SIZE - 4 + len(body), version=9, rid=41) + body
    good = encode_frame(FrameKind.REQUEST, RequestCode.TOPIC_LIST, 42, b"\x80")
    reader = _reader(*_bytewise(bad + good))
    with pytest.raises(FrameError) as info:
        await read_frame(reader, LIMIT)
    assert not info.value.fatal and info.value.request_id == 41
    assert "version 9" in str(info.value)
    frame = await read_frame(reader, LIMIT)
    assert frame.request_id == 42 and frame.code == RequestCode.TOPIC_LIST


@pytest.mark.timeout(10)
@in_loop
async def test_bad_kind_is_not_fatal() -> None:
    bad = _header(HEADER_SIZE - 4 + 2, kind=7, rid=5) + b"ab"
    good = encode_frame(FrameKind.REQUEST, RequestCode.TOPIC_LIST, 6, b"")
    reader = _reader(bad + good)
    with pytest.raises(FrameError) as info:
        await read_frame(reader, LIMIT)
    assert not info.value.fatal and info.value.kind == 7
    assert (await read_frame(reader, LIMIT)).request_id == 6


@pytest.mark.timeout(10)
@in_loop
async def test_oversized_frame_is_fatal_and_its_body_is_never_read() -> None:
    # The header announces more than the limit; the body is not even sent.
    reader = _reader(_header(LIMIT + 100, rid=77), eof=False)
    with pytest.raises(FrameError) as info:
        await asyncio.wait_for(read_frame(reader, LIMIT), 5)
    assert info.value.fatal and info.value.request_id == 77
    assert "over the limit" in str(info.value)


@pytest.mark.timeout(10)
@in_loop
async def test_impossible_length_is_fatal_without_a_request_id() -> None:
    reader = _reader(_header(3) + b"garbage")
    with pytest.raises(FrameError) as info:
        await read_frame(reader, LIMIT)
    assert info.value.fatal and info.value.request_id is None


@pytest.mark.timeout(10)
@in_loop
async def test_truncated_body_is_an_incomplete_read() -> None:
    data = encode_frame(FrameKind.REQUEST, RequestCode.SEND_MESSAGE, 1, b"x" * 50)
    reader = _reader(data[:-10])
    with pytest.raises(asyncio.IncompleteReadError):
        await read_frame(reader, LIMIT)
