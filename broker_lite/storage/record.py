"""The commit-log record layout, byte for byte RocketMQ 5's, and its reader: no I/O.

The writer is :mod:`broker_lite.storage.record_encoder`.

Layout (big-endian), as ``MessageExtEncoder.encode`` and
``CommitLog.DefaultAppendMessageCallback.doAppend`` write it:

=====  ========  =============================================================
off    size      field
=====  ========  =============================================================
0      4         total size of the record, this field included
4      4         magic: ``MAGIC_V1`` (1-byte topic length), ``MAGIC_V2`` (2-byte)
8      4         body CRC: ``crc32(body) & 0x7FFFFFFF`` (``UtilAll.crc32``)
12     4         queue id
16     4         flag (user flag)
20     8         queue offset (0 for PREPARED and ROLLBACK records)
28     8         physical offset (where the record starts in the commit log)
36     4         sysflag (``MessageSysFlag``)
40     8         born timestamp, ms
48     8 / 20    born host: IPv4 + port, or IPv6 + port when sysflag has 0x10
..     8         store timestamp, ms
..     8 / 20    store host: IPv4 + port, or IPv6 + port when sysflag has 0x20
..     4         reconsume times
..     8         prepared-transaction offset
..     4         body length, then the body
..     1 / 2     topic length (V1: 1 byte, V2: 2), then the topic (UTF-8)
..     2         properties length, then ``k\\x01v\\x02`` pairs (UTF-8)
=====  ========  =============================================================

V2 is written only for topics longer than 127 bytes (RocketMQ:
``autoMessageVersionOnTopicLen``). With RocketMQ's ``enabledAppendPropCRC``
(on by default here) the properties end with a 20-byte ``__CRC32#`` property:
the name, ``\\x01``, ten decimal digits of the CRC least significant first
(zero padded on the right), ``\\x02``; the CRC is ``crc32 & 0x7FFFFFFF`` of every
byte of the record before those 20. Properties that do not already end with
``\\x02`` get one before it. The decoder checks and hides that property.

A blank end-of-file record is ``total size`` (the rest of the segment) and
``BLANK_MAGIC``; only those 8 bytes are written. Readers move on to the next
segment.
"""

from __future__ import annotations

import ipaddress
import mmap
import struct
from enum import IntEnum
from functools import lru_cache

import msgspec
from zlib_ng.zlib_ng import crc32  # zlib's CRC-32, 3x faster

from broker_lite.storage.properties import KEYS, TAGS, UNIQ_KEY, decode_properties, split_keys

__all__ = [
    "BLANK_MAGIC",
    "CRC_TAIL_SIZE",
    "HEADER_SIZE",
    "MAGIC_V1",
    "MAGIC_V2",
    "MESSAGE_MAGICS",
    "MIN_BLANK_SIZE",
    "QUEUED_TX_TYPES",
    "Buffer",
    "HostAddress",
    "StoredRecord",
    "SysFlag",
    "TxType",
    "crc_digits",
    "decode_record",
    "format_host",
    "head_struct",
    "pack_host",
    "peek_route",
    "sysflag_name",
    "tag_hash",
    "verify_record",
]

MAGIC_V1 = 0xDAA320A7  # MessageDecoder.MESSAGE_MAGIC_CODE (-626843481)
MAGIC_V2 = 0xDAA320AB  # MessageDecoder.MESSAGE_MAGIC_CODE_V2 (-626843477)
MESSAGE_MAGICS = frozenset({MAGIC_V1, MAGIC_V2})
BLANK_MAGIC = 0xCBD43194  # CommitLog.BLANK_MAGIC_CODE (-875286124)

_MASK31 = 0x7FFFFFFF
_IPV4, _IPV6 = 8, 20  # host field sizes: address + 4-byte port
_HEAD4 = struct.Struct(">IIIiiqqiq8sq8siqI")
HEADER_SIZE = _HEAD4.size  # 88: an IPv4 record up to and including the body length
_TOTAL_MAGIC = struct.Struct(">II")
#: total size, magic, body CRC, sysflag (36), body length (84: where IPv4 hosts put it)
_FAST = struct.Struct(">III24xi44xi")
_FIRST = struct.Struct(">III")  # total size, magic, body CRC
_ROUTE = struct.Struct(">iiqqi")  # queue id, flag, queue offset, physical offset, sysflag
_I32 = struct.Struct(">i")
_U16 = struct.Struct(">H")
MIN_BLANK_SIZE = _TOTAL_MAGIC.size

_CRC_KEY = b"__CRC32#\x01"  # MessageConst.PROPERTY_CRC32 + NAME_VALUE_SEPARATOR
CRC_TAIL_SIZE = len(_CRC_KEY) + 10 + 1  # CommitLog.CRC32_RESERVED_LEN: 20
_MIN_RECORD_SIZE = HEADER_SIZE + 1 + 2

HostAddress = bytes  # 8 bytes (IPv4 + port) or 20 bytes (IPv6 + port)
Buffer = bytes | bytearray | memoryview | mmap.mmap  # what the codec reads from


class TxType(IntEnum):
    """Transaction type, bits 2-3 of the sysflag (RocketMQ ``MessageSysFlag``)."""

    NOT_TYPE = 0
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


class SysFlag(IntEnum):
    """The sysflag bits RocketMQ 5 defines (``MessageSysFlag``)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TX_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE = 0x700  # bits 8-10: 1 LZ4, 2 ZSTD, 3 (or 0) ZLIB


#: PREPARED and ROLLBACK records enter no consume queue (queue offset 0), as in doAppend
QUEUED_TX_TYPES = frozenset({TxType.NOT_TYPE, TxType.COMMIT})

_TX_NAMES = {0: "normal", 0x4: "prepared", 0x8: "commit", 0xC: "rollback"}
_HOST_BITS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
# plain ints for the read path (an IntEnum member lookup costs more than the test)
_BORN_V6 = int(SysFlag.BORNHOST_V6)
_STORE_V6 = int(SysFlag.STOREHOST_V6)
_HOST_MASK = _BORN_V6 | _STORE_V6


def sysflag_name(sysflag: int) -> str:
    """``normal``, ``prepared``, ``commit`` or ``rollback`` (plus ``+compressed``, ``+batch``)."""
    name = _TX_NAMES[sysflag & SysFlag.TX_MASK]
    if sysflag & SysFlag.COMPRESSED:
        name += "+compressed"
    if sysflag & SysFlag.INNER_BATCH:
        name += "+batch"
    return name


def pack_host(host: str, port: int) -> HostAddress:
    """Pack an IPv4 (8 bytes) or IPv6 (20 bytes) address and port as a record keeps it."""
    host = host.strip("[]")
    try:
        raw = ipaddress.ip_address(host).packed
    except ValueError:
        raw = b"\x00\x00\x00\x00"
    return raw + struct.pack(">i", port)


def format_host(packed: HostAddress) -> str:
    """``"127.0.0.1:9876"`` or ``"[::1]:9876"`` from the packed form."""
    port = struct.unpack(">i", packed[-4:])[0]
    if len(packed) == _IPV6:
        return f"[{ipaddress.IPv6Address(packed[:16])}]:{port}"
    return f"{ipaddress.IPv4Address(packed[:4])}:{port}"


@lru_cache(maxsize=8192)
def tag_hash(tag: str | None) -> int:
    """Java's ``String.hashCode`` of the tag, as RocketMQ keeps in consume queues."""
    if not tag:
        return 0
    return _java_hash(tag)


@lru_cache(maxsize=4096)  # a few tags, each met on every message that has it
def _java_hash(tag: str) -> int:
    h = 0
    units = tag.encode("utf-16-be", "surrogatepass")  # Java hashes UTF-16 code units
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def crc_digits(crc: int) -> bytes:
    """``MessageDecoder.createCrc32``'s ten digits: least significant first, '0'-padded."""
    return (b"%d" % crc)[::-1].ljust(10, b"0")


@lru_cache(maxsize=8)
def head_struct(born_len: int, store_len: int) -> struct.Struct:
    """The fixed part of a record, up to the body length, for these host field sizes."""
    return struct.Struct(f">IIIiiqqiq{born_len}sq{store_len}siqI")


class StoredRecord(msgspec.Struct, frozen=True):
    """One decoded commit-log record. ``body`` is as stored (compressed if flagged).

    A frozen msgspec Struct: one is made per record read (pulls, recovery, the
    transaction service), and a frozen dataclass of these 18 fields cost ~2 us to build.
    """

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
    magic: int = MAGIC_V1
    crc_tail: bool = False

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


def _body_length_at(buf: Buffer, pos: int) -> int:
    """Where the body length field of the record at ``pos`` is (it moves with IPv6 hosts)."""
    sysflag = _I32.unpack_from(buf, pos + 36)[0]
    return pos + 68 + (_IPV6 if sysflag & _BORN_V6 else _IPV4) \
        + (_IPV6 if sysflag & _STORE_V6 else _IPV4)


def _topic_at(buf: Buffer, magic: int, body_end: int) -> tuple[int, int]:
    """``(topic start, topic length)`` for a record whose body ends at ``body_end``."""
    if magic == MAGIC_V1:
        return body_end + 1, buf[body_end]
    return body_end + 2, _U16.unpack_from(buf, body_end)[0]


def _has_tail(view: memoryview, end: int, props_len: int) -> bool:
    if props_len < CRC_TAIL_SIZE or view[end - CRC_TAIL_SIZE : end - 11] != _CRC_KEY:
        return False
    return props_len == CRC_TAIL_SIZE or view[end - CRC_TAIL_SIZE - 1] == 2


def _verify_short(buf: Buffer, pos: int, limit: int) -> tuple[int, int, str] | str:
    """:func:`verify_record` for fewer than 88 bytes: a blank record, or no record."""
    if limit - pos >= MIN_BLANK_SIZE:
        total, magic = _TOTAL_MAGIC.unpack_from(buf, pos)
        if magic == BLANK_MAGIC:
            return (total, magic, "") if total == limit - pos else \
                f"blank record of size {total} does not reach the segment end"
        if magic in MESSAGE_MAGICS:
            return f"bad total size {total}"
    return "truncated header" if any(bytes(buf[pos:limit])) else "end of written data"


def verify_record(
    buf: Buffer, pos: int, limit: int, require_tail: bool = False
) -> tuple[int, int, str] | str:
    """Check the record at ``pos`` (which must end by ``limit``).

    Returns ``(total_size, magic, "")`` when the record is sound or is a blank
    end-of-file record, or a short reason string when it is not. Checks the
    lengths add up (as ``CommitLog.checkMessageAndReturnSize``), then the
    ``__CRC32#`` tail's CRC when there is one (it covers every byte before it,
    the body and its CRC field included, as RocketMQ's ``forceVerifyPropCRC``
    checks it), else the body CRC; ``require_tail``: there must be a tail.
    Never raises for bad bytes, so recovery and ``inspect --verify`` can name
    the problem. Pass a ``memoryview`` when checking many records of one
    buffer: it saves making one per call.
    """
    if limit - pos < HEADER_SIZE:
        return _verify_short(buf, pos, limit)
    total, magic, body_crc, sysflag, body_len = _FAST.unpack_from(buf, pos)
    if magic not in MESSAGE_MAGICS:
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
    if sysflag & _HOST_MASK:
        body_at = _body_length_at(view, pos) + 4
        if body_at + 3 > end:
            return f"bad total size {total}"
        body_len = _I32.unpack_from(view, body_at - 4)[0]
    else:
        body_at = pos + HEADER_SIZE
    body_end = body_at + body_len
    if body_len < 0 or body_end + (3 if magic == MAGIC_V1 else 4) > end:
        return f"bad body length {body_len}"
    if magic == MAGIC_V1:
        props_at = body_end + view[body_end] + 3
    else:
        props_at = body_end + _U16.unpack_from(view, body_end)[0] + 4
    if props_at > end:
        return f"bad topic length {props_at - body_end}"
    props_len = _U16.unpack_from(view, props_at - 2)[0]
    if props_at + props_len != end:
        return f"total size {total} does not match the fields' lengths"
    if _has_tail(view, end, props_len):
        crc = crc32(view[pos : end - CRC_TAIL_SIZE]) & _MASK31
        if view[end - 11 : end - 1] == crc_digits(crc) and view[end - 1] == 2:
            return total, magic, ""
        if crc32(view[body_at:body_end]) & _MASK31 != body_crc:
            return "body CRC mismatch"  # the narrower reason, when it is the body
        return "record CRC mismatch"
    if require_tail:
        return "record CRC property (__CRC32#) missing"
    if crc32(view[body_at:body_end]) & _MASK31 != body_crc:
        return "body CRC mismatch"
    return total, magic, ""


def peek_route(buf: Buffer, pos: int) -> tuple[int, int, int, bytes]:
    """``(sysflag, queue_id, queue_offset, topic)`` of a verified record, without decoding it."""
    queue_id, _flag, queue_offset, _phys, sysflag = _ROUTE.unpack_from(buf, pos + 12)
    magic = _TOTAL_MAGIC.unpack_from(buf, pos)[1]
    body_at = _body_length_at(buf, pos) + 4
    body_end = body_at + _I32.unpack_from(buf, body_at - 4)[0]
    topic_at, topic_len = _topic_at(buf, magic, body_end)
    return sysflag, queue_id, queue_offset, bytes(buf[topic_at : topic_at + topic_len])


def decode_record(
    buf: Buffer, pos: int, *, verified: bool = False, require_tail: bool = False
) -> StoredRecord:
    """Decode the record at ``pos``. Unless ``verified``, checks it first.

    Raises :class:`ValueError` naming the problem when the bytes are not a
    sound message record.
    """
    if not verified:
        checked = verify_record(buf, pos, len(buf), require_tail)
        if isinstance(checked, str):
            raise ValueError(checked)
        if checked[1] == BLANK_MAGIC:
            raise ValueError("blank end-of-file record, not a message")
    view = memoryview(buf)
    fields = _HEAD4.unpack_from(view, pos)
    sysflag = fields[7]
    if sysflag & _HOST_MASK:  # an IPv6 host: the fields after it move
        fields = head_struct(_IPV6 if sysflag & _BORN_V6 else _IPV4,
                             _IPV6 if sysflag & _STORE_V6 else _IPV4).unpack_from(view, pos)
    (total, magic, body_crc, queue_id, flag, queue_offset, physical_offset, _sysflag,
     born_ts, born_host, store_ts, store_host, reconsume, prepared, body_len,
     ) = fields
    at = pos + 48 + len(born_host) + 8 + len(store_host) + 16  # the header's size
    body_end = at + body_len
    body = bytes(view[at:body_end])
    if magic == MAGIC_V1:
        topic_at, topic_len = body_end + 1, view[body_end]
    else:
        topic_at, topic_len = body_end + 2, _U16.unpack_from(view, body_end)[0]
    topic = bytes(view[topic_at : topic_at + topic_len]).decode("utf-8")
    props_at = topic_at + topic_len + 2
    end = pos + total
    tail = _has_tail(view, end, end - props_at)
    props = decode_properties(bytes(view[props_at : end - CRC_TAIL_SIZE if tail else end]))
    return StoredRecord(physical_offset, total, topic, queue_id, queue_offset, flag, sysflag,
                        body, body_crc, props, born_ts, born_host, store_ts, store_host,
                        reconsume, prepared, magic, tail)
