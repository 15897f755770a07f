"""Bounded decompression: a compressed body is never inflated past a limit.

A body of 1 MB can claim to expand to 1 GiB (a "decompression bomb"). Every
decompressor here streams its output and stops as soon as it would pass
``limit`` bytes, so the memory and CPU spent on a body are bounded by the limit
(the broker's ``max_message_size``), whatever the compressed data claims.

* :func:`inflate_zlib`: zlib or gzip data (gzip may hold several members, as
  :func:`gzip.decompress` accepts);
* :func:`inflate_lz4`: an LZ4 frame;
* :func:`inflate_zstd`: a ZSTD frame.

LZ4 and ZSTD come with the ``compression`` extra and load on the first body
that needs them; without it, such a body raises a
:class:`~broker_lite.errors.ConfigurationError` naming the extra (zlib and gzip
need nothing).

Each raises :class:`InflatedTooLargeError` (a
:class:`~broker_lite.errors.MessageTooLargeError`, naming the limit) past the
limit, and :class:`ValueError` for data that does not decompress.
"""

from __future__ import annotations

import importlib
import io
import zlib
from types import ModuleType

from broker_lite.errors import ConfigurationError, MessageTooLargeError, RequestError
from broker_lite.extras import needs_extra

__all__ = ["InflateBudget", "InflatedTooLargeError", "codec", "inflate_lz4", "inflate_zlib",
           "inflate_zstd"]

_GZIP_MAGIC = b"\x1f\x8b"
#: zlib's ``wbits`` for "zlib or gzip header, detected"
_AUTO_HEADER = 32 + zlib.MAX_WBITS


class InflatedTooLargeError(MessageTooLargeError):
    """A compressed body inflates past the limit; decompression stopped there."""

    def __init__(self, *, compressed: int, limit: int, setting: str = "max_message_size") -> None:
        RequestError.__init__(
            self, f"compressed body of {compressed} bytes inflates past the limit of {limit} "
                  f"bytes ({setting}); decompression stopped at the limit")
        self.size = limit + 1
        self.limit = limit
        self.topic = ""
        self.compressed = compressed


class InflateBudget:
    """What is left of the bytes one request may inflate in all (several bodies)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.left = total

    def take(self, size: int) -> None:
        self.left -= size


def _too_large(data: bytes, limit: int, setting: str) -> InflatedTooLargeError:
    return InflatedTooLargeError(compressed=len(data), limit=limit, setting=setting)


def inflate_zlib(data: bytes, limit: int, *, setting: str = "max_message_size") -> bytes:
    """zlib or gzip ``data`` inflated, at most ``limit`` bytes."""
    out = bytearray()
    rest = data
    while True:
        inflater = zlib.decompressobj(_AUTO_HEADER)
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise ValueError(str(exc)) from None
        if len(out) > limit:
            raise _too_large(data, limit, setting)
        if not inflater.eof:
            raise ValueError("compressed data is truncated")
        rest = inflater.unused_data
        if not rest.startswith(_GZIP_MAGIC):  # another gzip member follows, or the end
            return bytes(out)


def codec(name: str) -> ModuleType:
    """``lz4.frame`` or ``zstandard``, loaded now; without the ``compression`` extra, one
    :class:`~broker_lite.errors.ConfigurationError` line naming it."""
    module = {"lz4": "lz4.frame", "zstd": "zstandard"}[name]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        raise ConfigurationError(needs_extra(f"a {name.upper()}-compressed body", "compression"),
                                 setting="compression") from None


def inflate_lz4(data: bytes, limit: int, *, setting: str = "max_message_size") -> bytes:
    """An LZ4 frame inflated, at most ``limit`` bytes."""
    inflater = codec("lz4").LZ4FrameDecompressor()
    try:
        out = inflater.decompress(data, max_length=limit + 1)
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    if len(out) > limit:
        raise _too_large(data, limit, setting)
    if not inflater.eof:
        raise ValueError("LZ4 frame is truncated")
    return bytes(out)


def inflate_zstd(data: bytes, limit: int, *, setting: str = "max_message_size") -> bytes:
    """A ZSTD frame inflated, at most ``limit`` bytes."""
    zstandard = codec("zstd")
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
    try:
        out = bytearray()
        while len(out) <= limit:
            chunk = reader.read(min(1 << 20, limit + 1 - len(out)))
            if not chunk:
                break
            out += chunk
    except zstandard.ZstdError as exc:
        raise ValueError(str(exc)) from None
    if len(out) > limit:
        raise _too_large(data, limit, setting)
    return bytes(out)
