"""The native protocol's real frame parser, :class:`FrameDecoder`, fed arbitrary chunks.

The asyncio server and client both push whatever the socket gave them into a
``FrameDecoder`` and take whole frames with ``next()``; these tests feed it the
same way, with hypothesis choosing where the stream is cut.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_lite.protocol import (
    HEADER_SIZE,
    Frame,
    FrameDecoder,
    FrameError,
    FrameKind,
    RequestCode,
    encode_frame,
)

LIMIT = 64 * 1024

frames = st.builds(
    Frame,
    kind=st.sampled_from(list(FrameKind)),
    code=st.integers(min_value=0, max_value=0xFFFF),
    request_id=st.integers(min_value=0, max_value=2**64 - 1),
    body=st.binary(max_size=2048),
)


def _encoded(frame: Frame) -> bytes:
    return encode_frame(frame.kind, frame.code, frame.request_id, frame.body)


def _header(length: int, version: int = 1, kind: int = 0, code: int = 10, rid: int = 7) -> bytes:
    return struct.pack(">IBBHQ", length, version, kind, code, rid)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    """``data`` split at the (sorted, de-duplicated) positions in ``cuts``."""
    points = sorted({c % (len(data) + 1) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def _drain(decoder: FrameDecoder) -> list[Frame | FrameError]:
    out: list[Frame | FrameError] = []
    while (item := decoder.next()) is not None:
        out.append(item if isinstance(item, FrameError) else Frame(*item))
        if isinstance(item, FrameError) and item.fatal:
            break
    return out


def _feed_in_chunks(decoder: FrameDecoder, chunks: list[bytes]) -> list[Frame | FrameError]:
    out: list[Frame | FrameError] = []
    for chunk in chunks:
        decoder.push(chunk)
        out.extend(_drain(decoder))
    return out


@pytest.mark.timeout(60)
@settings(max_examples=200, deadline=None)
@given(sent=st.lists(frames, max_size=8), cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_any_chunking_yields_the_frames_sent_in_order(sent: list[Frame],
                                                      cuts: list[int]) -> None:
    data = b"".join(_encoded(f) for f in sent)
    decoder = FrameDecoder(LIMIT)
    got = _feed_in_chunks(decoder, _cut(data, cuts))
    assert got == sent
    assert decoder.buffered == 0


@pytest.mark.timeout(60)
@settings(max_examples=100, deadline=None)
@given(frame=frames, keep=st.integers(min_value=0))
def test_a_partial_frame_waits_and_counts_as_buffered(frame: Frame, keep: int) -> None:
    data = _encoded(frame)
    keep %= len(data)  # every proper prefix, the empty one included
    decoder = FrameDecoder(LIMIT)
    decoder.push(data[:keep])
    assert decoder.next() is None
    assert decoder.buffered == keep
    decoder.push(data[keep:])
    assert decoder.next() == (frame.kind, frame.code, frame.request_id, frame.body)
    assert decoder.next() is None


@pytest.mark.timeout(60)
@settings(max_examples=100, deadline=None)
@given(version=st.integers(min_value=0, max_value=255).filter(lambda v: v != 1),
       body=st.binary(max_size=64), cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_a_bad_version_is_skipped_whole_and_the_stream_goes_on(version: int, body: bytes,
                                                               cuts: list[int]) -> None:
    bad = _header(HEADER_SIZE - 4 + len(body), version=version, rid=41) + body
    good = encode_frame(FrameKind.REQUEST, RequestCode.TOPIC_LIST, 42, b"\x80")
    got = _feed_in_chunks(FrameDecoder(LIMIT), _cut(bad + good, cuts))
    assert len(got) == 2
    error, frame = got
    assert isinstance(error, FrameError) and not error.fatal
    assert error.request_id == 41 and f"version {version}" in str(error)
    assert frame == Frame(FrameKind.REQUEST, RequestCode.TOPIC_LIST, 42, b"\x80")


@pytest.mark.timeout(10)
def test_an_unknown_kind_is_not_fatal() -> None:
    bad = _header(HEADER_SIZE - 4 + 2, kind=7, rid=5) + b"ab"
    good = encode_frame(FrameKind.REQUEST, RequestCode.TOPIC_LIST, 6, b"")
    got = FrameDecoder(LIMIT).feed(bad + good)
    assert isinstance(got[0], FrameError) and not got[0].fatal and got[0].kind == 7
    assert got[1] == Frame(FrameKind.REQUEST, RequestCode.TOPIC_LIST, 6, b"")


@pytest.mark.timeout(10)
def test_an_oversized_frame_is_fatal_before_its_body_arrives() -> None:
    decoder = FrameDecoder(LIMIT)
    decoder.push(_header(LIMIT + 100, rid=77))  # the body is never sent
    error = decoder.next()
    assert isinstance(error, FrameError) and error.fatal and error.request_id == 77
    assert "over the limit" in str(error)
    assert decoder.buffered == 0  # the stream cannot be resynced: its bytes are dropped


@pytest.mark.timeout(10)
def test_an_impossible_length_is_fatal_without_a_request_id() -> None:
    got = FrameDecoder(LIMIT).feed(_header(3) + b"garbage")
    assert len(got) == 1
    assert isinstance(got[0], FrameError) and got[0].fatal and got[0].request_id is None


@pytest.mark.timeout(10)
def test_frames_after_a_fatal_error_are_not_returned() -> None:
    good = encode_frame(FrameKind.ONEWAY, RequestCode.HEARTBEAT, 2, b"")
    got = FrameDecoder(LIMIT).feed(_header(3) + good)
    assert len(got) == 1 and isinstance(got[0], FrameError)
