"""What a stored body holds: compressed bodies and inner batches, per the sysflag.

RocketMQ keeps a message body as the producer sent it. ``COMPRESSED`` (0x1)
says it is compressed, with the algorithm in sysflag bits 8-10
(``MessageSysFlag.COMPRESSION_TYPE_COMPARATOR``): 1 LZ4 (frame format), 2 ZSTD
(frame format), 3 zlib; 0 is zlib too, as before compression types existed
(``CompressionType.findByValue``). ``INNER_BATCH`` (0x80, with ``NEED_UNWRAP``
0x40) says the body is a batch of inner messages, each ``total size, magic (0),
body CRC (0), flag, body length, body, properties length (2 bytes),
properties`` (``MessageDecoder.encodeMessage``). A flag this module cannot read
raises :class:`~broker_lite.errors.CorruptRecordError` naming the record's
offset and the flag.

A compressed body is inflated by :mod:`broker_lite.storage.inflate`, never past
``limit`` (the broker's ``max_message_size``, 4 MiB unless told): a record
that claims more is unreadable
(a CorruptRecordError naming the limit), whatever the compressed data says.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from broker_lite.errors import ConfigurationError, CorruptRecordError
from broker_lite.storage.config import StoreConfig
from broker_lite.storage.inflate import (
    InflatedTooLargeError,
    codec,
    inflate_lz4,
    inflate_zlib,
    inflate_zstd,
)
from broker_lite.storage.properties import decode_properties
from broker_lite.storage.record import StoredRecord, SysFlag

__all__ = ["COMPRESSION_NAMES", "DEFAULT_INFLATE_LIMIT", "InnerMessage", "compress",
           "inner_messages", "message_body"]

#: the limit a body is inflated to unless told: StoreConfig's default max_message_size
DEFAULT_INFLATE_LIMIT: int = StoreConfig(data_dir=Path()).max_message_size

#: compression type (sysflag bits 8-10) -> name
COMPRESSION_NAMES = {0: "zlib", 1: "lz4", 2: "zstd", 3: "zlib"}
_KNOWN_BITS = 0x7FF
_INNER_HEAD = struct.Struct(">iiiii")  # total size, magic, body CRC, flag, body length
_U16 = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class InnerMessage:
    """One message of an inner batch."""

    flag: int
    body: bytes
    properties: dict[str, str]


def _unreadable(record: StoredRecord, what: str) -> CorruptRecordError:
    return CorruptRecordError(f"sysflag 0x{record.sysflag:X}: {what}",
                              offset=record.physical_offset)


def _check_bits(record: StoredRecord) -> None:
    unknown = record.sysflag & ~_KNOWN_BITS
    if unknown:
        raise _unreadable(record, f"unknown sysflag bits 0x{unknown:X}")


def compression_type(sysflag: int) -> int:
    return (sysflag & SysFlag.COMPRESSION_TYPE) >> 8


def compress(body: bytes, kind: str) -> tuple[bytes, int]:
    """``(compressed body, sysflag bits)`` as a RocketMQ producer compresses with ``kind``."""
    if kind == "zlib":
        return zlib.compress(body), SysFlag.COMPRESSED | 0x300
    if kind == "lz4":
        return codec("lz4").compress(body), SysFlag.COMPRESSED | 0x100
    if kind == "zstd":
        return codec("zstd").ZstdCompressor().compress(body), SysFlag.COMPRESSED | 0x200
    raise ValueError(f"compression must be zlib, lz4 or zstd, not {kind!r}")


def message_body(record: StoredRecord, *, limit: int = DEFAULT_INFLATE_LIMIT) -> bytes:
    """The body as the producer wrote it: decompressed when the sysflag says so.

    Never inflated past ``limit`` bytes: a record that would is unreadable
    (CorruptRecordError naming the limit).
    """
    _check_bits(record)
    if not record.sysflag & SysFlag.COMPRESSED:
        return record.body
    kind = compression_type(record.sysflag)
    try:
        if kind in (0, 3):
            return inflate_zlib(record.body, limit)
        if kind == 1:
            return inflate_lz4(record.body, limit)
        if kind == 2:
            return inflate_zstd(record.body, limit)
    except InflatedTooLargeError as exc:
        raise _unreadable(record, f"{COMPRESSION_NAMES[kind]} body: {exc}") from None
    except ConfigurationError:  # no `compression` extra: the record is fine, the install not
        raise
    except ValueError as exc:
        raise _unreadable(record, f"{COMPRESSION_NAMES[kind]} body does not decompress: "
                          f"{exc}") from exc
    raise _unreadable(record, f"compression type {kind} (bits 8-10) is not LZ4 (1), "
                      "ZSTD (2) or ZLIB (3)")


def inner_messages(record: StoredRecord, *,
                   limit: int = DEFAULT_INFLATE_LIMIT) -> list[InnerMessage]:
    """The messages of an ``INNER_BATCH`` record (``[]`` for any other record)."""
    if not record.sysflag & SysFlag.INNER_BATCH:
        _check_bits(record)
        return []
    data = message_body(record, limit=limit)
    found: list[InnerMessage] = []
    pos = 0
    while pos < len(data):
        try:
            total, _magic, _crc, flag, body_len = _INNER_HEAD.unpack_from(data, pos)
            body_at = pos + _INNER_HEAD.size
            props_at = body_at + body_len + 2
            props_len = _U16.unpack_from(data, props_at - 2)[0]
            props_end = props_at + props_len
            if body_len < 0 or props_end > len(data) or total != props_end - pos:
                raise ValueError(f"inner message {len(found)} has inconsistent lengths")
            props = decode_properties(data[props_at:props_end])
        except (struct.error, ValueError) as exc:
            raise _unreadable(record, f"inner batch (0x80) unreadable at byte {pos}: "
                              f"{exc}") from exc
        found.append(InnerMessage(flag, data[body_at : body_at + body_len], props))
        pos = props_end
    return found
