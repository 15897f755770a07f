"""The commit-log record codec: plain functions, no I/O.

Layout (big-endian), following RocketMQ's CommitLog record:

====  =====  ===========================================================
off   size   field
====  =====  ===========================================================
0     4      total size of the record, this field included
4     4      magic code (``MESSAGE_MAGIC``; ``BLANK_MAGIC`` marks end of file)
8     4      body CRC32
12    4      queue id
16    4      flag (user flag)
20    8      queue offset (index of the record in its consume queue)
28    8      physical offset (where the record starts in the commit log)
36    4      sysflag (transaction type, compression, multi-tags bits)
40    8      born timestamp, ms
48    8      born host (IPv4 + port)
56    8      store timestamp, ms
64    8      store host (IPv4 + port)
72    4      reconsume times
76    8      prepared-transaction offset
84    4      body length, then the body
..    2      topic length, then the topic (UTF-8)
..    2      properties length, then ``k\\x01v\\x02`` pairs (UTF-8)
====  =====  ===========================================================

The body CRC covers only the body, as in RocketMQ. To make sure a flipped byte
in the header, topic or properties is never served either, every record ends
with one more property, ``__CRC32#`` (RocketMQ 5 appends a CRC property the
same way), holding eight hex digits: the CRC32 of every byte of the record
outside the body and outside those eight digits. The body CRC is inside the
covered bytes, so together the two CRCs cover the whole record. The decoder
checks and hides that property.

A blank end-of-file record is ``total size`` (the rest of the segment) and
``BLANK_MAGIC``; readers move on to the next segment.
"""

from __future__ import annotations

import mmap
import socket
import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

from broker_lite.storage.properties import KEYS, TAGS, UNIQ_KEY, decode_properties, split_keys

__all__ = [
    "BLANK_MAGIC",
    "HEADER_SIZE",
    "MESSAGE_MAGIC",
    "MIN_BLANK_SIZE",
    "Buffer",
    "HostAddress",
    "RecordHeader",
    "StoredRecord",
    "SysFlag",
    "TxType",
    "decode_record",
    "encode_record",
    "encode_record_fast",
    "format_host",
    "pack_host",
    "peek_route",
    "read_header",
    "record_size",
    "sysflag_name",
    "tag_hash",
    "verify_record",
]

MESSAGE_MAGIC = 0xDAA320AB
BLANK_MAGIC = 0xCBD43194

_HEADER = struct.Struct(">IIIiiqqiq8sq8siqI")
HEADER_SIZE = _HEADER.size  # 88: everything up to and including the body length
_TOTAL_MAGIC = struct.Struct(">II")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ROUTE = struct.Struct(">iiqqi")  # queue id, flag, queue offset, physical offset, sysflag
_FIRST = struct.Struct(">III")  # total size, magic, body CRC
_TAIL = _U16
MIN_BLANK_SIZE = _TOTAL_MAGIC.size

_CRC_PREFIX = b"__CRC32#\x01"
_CRC_PREFIX_LEN = len(_CRC_PREFIX)
_CRC_TRAILER_SIZE = _CRC_PREFIX_LEN + 8 + 1  # name, separator, 8 hex digits, \x02
_MIN_RECORD_SIZE = HEADER_SIZE + 2 + 2 + _CRC_TRAILER_SIZE

HostAddress = bytes  # 8 bytes: IPv4 address, then the port as a 4-byte int
Buffer = bytes | bytearray | memoryview | mmap.mmap  # what the codec reads from


class TxType(IntEnum):
    """Transaction type, bits 2-3 of the sysflag (RocketMQ ``MessageSysFlag``)."""

    NOT_TYPE = 0
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


class SysFlag(IntEnum):
    """The other sysflag bits broker_lite knows by name."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TX_MASK = 0xC


_TX_NAMES = {0: "normal", 0x4: "prepared", 0x8: "commit", 0xC: "rollback"}


def sysflag_name(sysflag: int) -> str:
    """``normal``, ``prepared``, ``commit`` or ``rollback`` (plus ``+compressed``)."""
    name = _TX_NAMES[sysflag & SysFlag.TX_MASK]
    if sysflag & SysFlag.COMPRESSED:
        name += "+compressed"
    return name


def pack_host(host: str, port: int) -> HostAddress:
    """Pack an IPv4 address and port into the 8 bytes a record keeps."""
    try:
        raw = socket.inet_aton(host)
    except OSError:
        raw = b"\x00\x00\x00\x00"
    return raw + struct.pack(">i", port)


def format_host(packed: HostAddress) -> str:
    """``"127.0.0.1:9876"`` from the packed form."""
    return f"{socket.inet_ntoa(packed[:4])}:{struct.unpack('>i', packed[4:])[0]}"


@lru_cache(maxsize=8192)
def tag_hash(tag: str | None) -> int:
    """Java's ``String.hashCode`` of the tag, as RocketMQ keeps in consume queues."""
    if not tag:
        return 0
    h = 0
    units = tag.encode("utf-16-be", "surrogatepass")  # Java hashes UTF-16 code units
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def record_size(body_len: int, topic_len: int, props_len: int) -> int:
    """Total encoded size of a record with these lengths."""
    return HEADER_SIZE + body_len + 2 + topic_len + 2 + props_len + _CRC_TRAILER_SIZE


def encode_record(
    *,
    topic: bytes,
    body: bytes,
    properties: bytes,
    queue_id: int,
    flag: int,
    queue_offset: int,
    physical_offset: int,
    sysflag: int,
    born_timestamp: int,
    born_host: HostAddress,
    store_timestamp: int,
    store_host: HostAddress,
    reconsume_times: int,
    prepared_tx_offset: int,
) -> bytes:
    """Encode one record. ``topic`` and ``properties`` come already UTF-8 encoded."""
    return encode_record_fast(topic, body, properties, queue_id, flag, queue_offset,
                              physical_offset, sysflag, born_timestamp, born_host,
                              store_timestamp, store_host, reconsume_times, prepared_tx_offset)


def encode_record_fast(
    topic: bytes, body: bytes, properties: bytes, queue_id: int, flag: int,
    queue_offset: int, physical_offset: int, sysflag: int, born_timestamp: int,
    born_host: HostAddress, store_timestamp: int, store_host: HostAddress,
    reconsume_times: int, prepared_tx_offset: int,
) -> bytes:
    """:func:`encode_record` with positional arguments, for the store's hot path."""
    body_len = len(body)
    topic_len = len(topic)
    props_len = len(properties)
    head = _HEADER.pack(
        HEADER_SIZE + body_len + 4 + topic_len + props_len + _CRC_TRAILER_SIZE,
        MESSAGE_MAGIC, zlib.crc32(body), queue_id, flag, queue_offset, physical_offset,
        sysflag, born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
        prepared_tx_offset, body_len,
    )
    tail = _TAIL.pack(topic_len) + topic + _U16.pack(props_len + _CRC_TRAILER_SIZE) \
        + properties + _CRC_PREFIX
    crc = zlib.crc32(tail, zlib.crc32(head))
    return b"".join((head, body, tail, b"%08X\x02" % crc))


@dataclass(frozen=True, slots=True)
class RecordHeader:
    """The fixed header of a record, enough to route it without its body."""

    total_size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_tx_offset: int
    body_length: int


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One decoded commit-log record."""

    physical_offset: int
    total_size: int
    topic: str
    queue_id: int
    queue_offset: int
    flag: int
    sysflag: int
    body: bytes
    body_crc: int
    properties: dict[str, str]
    born_timestamp: int
    born_host: HostAddress
    store_timestamp: int
    store_host: HostAddress
    reconsume_times: int
    prepared_tx_offset: int

    @property
    def tx_type(self) -> TxType:
        return TxType(self.sysflag & SysFlag.TX_MASK)

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(UNIQ_KEY)

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.total_size


def read_header(buf: Buffer, pos: int) -> tuple[int, int]:
    """``(total_size, magic)`` at ``pos``; raises ``struct.error`` if out of bytes."""
    total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
    return int(total), int(magic)


def verify_record(
    buf: Buffer, pos: int, limit: int
) -> tuple[int, int, str] | str:
    """Check the record at ``pos`` (which must end by ``limit``).

    Returns ``(total_size, magic, "")`` when the record is sound or is a blank
    end-of-file record, or a short reason string when it is not. Never raises
    for bad bytes, so recovery and ``inspect --verify`` can name the problem.
    Pass a ``memoryview`` when checking many records of one buffer: it saves
    making one per call.
    """
    if limit - pos < _FIRST.size:
        if limit - pos >= MIN_BLANK_SIZE and _TOTAL_MAGIC.unpack_from(buf, pos)[1] == BLANK_MAGIC:
            total = _TOTAL_MAGIC.unpack_from(buf, pos)[0]
            return (total, BLANK_MAGIC, "") if total == limit - pos else "truncated blank record"
        return "truncated header" if any(bytes(buf[pos:limit])) else "end of written data"
    total, magic, body_crc = _FIRST.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        if magic == BLANK_MAGIC:
            if total != limit - pos:
                return f"blank record of size {total} does not reach the segment end"
            return total, magic, ""
        if total == 0 and magic == 0:
            return "end of written data"
        return f"bad magic code 0x{magic:08X}"
    end = pos + total
    if total < _MIN_RECORD_SIZE or end > limit:
        return f"bad total size {total}"
    view = buf if type(buf) is memoryview else memoryview(buf)
    body_at = pos + HEADER_SIZE
    body_end = body_at + _U32.unpack_from(buf, body_at - 4)[0]
    if body_end + 4 + _CRC_TRAILER_SIZE > end:
        return f"bad body length {body_end - body_at}"
    if zlib.crc32(view[body_at:body_end]) != body_crc:
        return "body CRC mismatch"
    digits_at = end - 9
    crc = zlib.crc32(view[body_end:digits_at], zlib.crc32(view[pos:body_at]))
    if view[digits_at : end - 1] != b"%08X" % crc or view[end - 1] != 2:
        return "record CRC mismatch"
    if view[digits_at - _CRC_PREFIX_LEN : digits_at] != _CRC_PREFIX:
        return "record CRC property missing"
    return total, magic, ""


def peek_route(buf: Buffer, pos: int) -> tuple[int, int, int, bytes]:
    """``(sysflag, queue_id, queue_offset, topic)`` of a verified record, without decoding it."""
    queue_id, _flag, queue_offset, _phys, sysflag = _ROUTE.unpack_from(buf, pos + 12)
    body_end = pos + HEADER_SIZE + _U32.unpack_from(buf, pos + HEADER_SIZE - 4)[0]
    topic_len = _U16.unpack_from(buf, body_end)[0]
    return sysflag, queue_id, queue_offset, bytes(buf[body_end + 2 : body_end + 2 + topic_len])


def decode_record(
    buf: Buffer, pos: int, *, verified: bool = False
) -> StoredRecord:
    """Decode the record at ``pos``. Unless ``verified``, checks it first.

    Raises :class:`ValueError` naming the problem when the bytes are not a
    sound message record.
    """
    if not verified:
        checked = verify_record(buf, pos, len(buf))
        if isinstance(checked, str):
            raise ValueError(checked)
        if checked[1] != MESSAGE_MAGIC:
            raise ValueError("blank end-of-file record, not a message")
    (
        total,
        _magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body_len,
    ) = _HEADER.unpack_from(buf, pos)
    view = memoryview(buf)
    at = pos + HEADER_SIZE
    body = bytes(view[at : at + body_len])
    at += body_len
    (topic_len,) = _U16.unpack_from(buf, at)
    at += 2
    topic = bytes(view[at : at + topic_len]).decode("utf-8")
    at += topic_len
    (props_len,) = _U16.unpack_from(buf, at)
    at += 2
    props = decode_properties(bytes(view[at : at + props_len - _CRC_TRAILER_SIZE]))
    return StoredRecord(
        physical_offset=physical_offset,
        total_size=total,
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        flag=flag,
        sysflag=sysflag,
        body=body,
        body_crc=body_crc,
        properties=props,
        born_timestamp=born_ts,
        born_host=born_host,
        store_timestamp=store_ts,
        store_host=store_host,
        reconsume_times=reconsume,
        prepared_tx_offset=prepared,
    )
