"""Writing commit-log records: RocketMQ 5's layout (see :mod:`.record`), encoded in place.

The store encodes each record straight into the commit log's mapping at the
position :meth:`CommitLog.reserve_at` gave, with ``struct.pack_into`` and
slice copies, and takes RocketMQ's ``__CRC32#`` record CRC in one
``crc32`` call over the bytes just written. No intermediate ``bytes`` are
built and joined, and the mapping receives each byte once. The bytes are the
same as :func:`encode_record` returns (which encodes into a new buffer with
the same function).
"""

from __future__ import annotations

import mmap

from zlib_ng.zlib_ng import crc32  # zlib's CRC-32, 3x faster

from broker_lite.storage.record import (
    CRC_TAIL_SIZE,
    HEADER_SIZE,
    MAGIC_V1,
    MAGIC_V2,
    HostAddress,
    SysFlag,
    head_struct,
)

__all__ = ["MAX_PROPERTIES_LENGTH", "encode_record", "encode_record_fast",
           "encode_record_into", "record_size"]

MAX_PROPERTIES_LENGTH = 32767  # Short.MAX_VALUE, the properties length field's limit
_MASK31 = 0x7FFFFFFF
_IPV4, _IPV6 = 8, 20
# plain ints: IntEnum member lookups cost a dict walk per use on the hot path
_BORN_V6 = int(SysFlag.BORNHOST_V6)
_STORE_V6 = int(SysFlag.STOREHOST_V6)
_NOT_HOST_BITS = ~(_BORN_V6 | _STORE_V6)
_HEAD4 = head_struct(_IPV4, _IPV4)
_CRC_KEY = b"__CRC32#\x01"  # MessageConst.PROPERTY_CRC32 + NAME_VALUE_SEPARATOR
_FIXED = HEADER_SIZE - 2 * _IPV4 + 2  # header without hosts, plus the properties length

WritableBuffer = bytearray | mmap.mmap


def record_size(body_len: int, topic_len: int, props_len: int, *, sysflag: int = 0,
                crc_tail: bool = True) -> int:
    """Total encoded size (``MessageExtEncoder.calMsgLength``) of a record with these lengths.

    ``props_len`` is the encoded properties' length, ending with ``\\x02``
    when not empty (as :func:`~.properties.encode_properties` returns them);
    ``sysflag`` only matters for its IPv6 host bits.
    """
    return (_FIXED + (_IPV6 if sysflag & _BORN_V6 else _IPV4)
            + (_IPV6 if sysflag & _STORE_V6 else _IPV4) + body_len
            + (1 if topic_len <= 127 else 2) + topic_len + props_len
            + (CRC_TAIL_SIZE if crc_tail else 0))


def encode_record_into(
    buf: WritableBuffer, pos: int, size: int, topic: bytes, body: bytes, properties: bytes,
    queue_id: int, flag: int, queue_offset: int, physical_offset: int, sysflag: int,
    born_timestamp: int, born_host: HostAddress, store_timestamp: int,
    store_host: HostAddress, reconsume_times: int, prepared_tx_offset: int,
    crc_tail: bool = True,
) -> int:
    """Encode one record into ``buf[pos : pos + size]``; return where it ends.

    ``size`` is :func:`record_size`'s answer, checked before a byte is
    written (:class:`ValueError` if the fields need another size). The host
    bits of ``sysflag`` are set from the hosts' sizes, as RocketMQ sets them
    from the addresses' families. Properties not ending with ``\\x02`` get one
    before the ``__CRC32#`` tail (RocketMQ's ``needAppendLastPropertySeparator``).
    """
    born_len = len(born_host)
    store_len = len(store_host)
    sysflag &= _NOT_HOST_BITS
    if born_len == _IPV4 and store_len == _IPV4:
        head = _HEAD4
    else:
        if born_len not in (_IPV4, _IPV6) or store_len not in (_IPV4, _IPV6):
            raise ValueError(f"a packed host is 8 or 20 bytes, not {born_len}/{store_len}")
        head = head_struct(born_len, store_len)
        sysflag |= (_BORN_V6 if born_len == _IPV6 else 0) \
            | (_STORE_V6 if store_len == _IPV6 else 0)
    if crc_tail and properties and properties[-1] != 2:
        properties += b"\x02"
    props_len = len(properties)
    field_len = props_len + CRC_TAIL_SIZE if crc_tail else props_len
    if field_len > MAX_PROPERTIES_LENGTH:
        raise ValueError(f"properties of {field_len} bytes are over the limit of "
                         f"{MAX_PROPERTIES_LENGTH} bytes")
    topic_len = len(topic)
    body_len = len(body)
    # topic length, topic, properties length, properties: one piece, one copy
    tail = b"".join((topic_len.to_bytes(1 if topic_len <= 127 else 2, "big"), topic,
                     field_len.to_bytes(2, "big"), properties))
    body_at = pos + head.size
    body_end = body_at + body_len
    props_end = body_end + len(tail)
    end = props_end + CRC_TAIL_SIZE if crc_tail else props_end
    if end - pos != size:
        raise ValueError(f"the record's fields take {end - pos} bytes, not the {size} reserved")
    body_crc = crc32(body)
    head.pack_into(buf, pos, size, MAGIC_V1 if topic_len <= 127 else MAGIC_V2,
                   body_crc & _MASK31, queue_id, flag, queue_offset, physical_offset,
                   sysflag, born_timestamp, born_host, store_timestamp, store_host,
                   reconsume_times, prepared_tx_offset, body_len)
    buf[body_at:body_end] = body
    buf[body_end:props_end] = tail
    if crc_tail:
        crc = crc32(tail, crc32(memoryview(buf)[pos:body_end])) & _MASK31
        buf[props_end:end] = b"".join((_CRC_KEY, (b"%d" % crc)[::-1].ljust(10, b"0"),
                                       b"\x02"))
    return end


def encode_record_fast(
    topic: bytes, body: bytes, properties: bytes, queue_id: int, flag: int,
    queue_offset: int, physical_offset: int, sysflag: int, born_timestamp: int,
    born_host: HostAddress, store_timestamp: int, store_host: HostAddress,
    reconsume_times: int, prepared_tx_offset: int, crc_tail: bool = True,
) -> bytes:
    """:func:`encode_record` with positional arguments."""
    if crc_tail and properties and properties[-1] != 2:
        properties += b"\x02"
    host_bits = (_BORN_V6 if len(born_host) == _IPV6 else 0) \
        | (_STORE_V6 if len(store_host) == _IPV6 else 0)
    size = record_size(len(body), len(topic), len(properties), sysflag=host_bits,
                       crc_tail=crc_tail)
    buf = bytearray(size)
    encode_record_into(buf, 0, size, topic, body, properties, queue_id, flag, queue_offset,
                       physical_offset, sysflag, born_timestamp, born_host, store_timestamp,
                       store_host, reconsume_times, prepared_tx_offset, crc_tail)
    return bytes(buf)


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
    crc_tail: bool = True,
) -> bytes:
    """Encode one record. ``topic`` and ``properties`` come already UTF-8 encoded."""
    return encode_record_fast(topic, body, properties, queue_id, flag, queue_offset,
                              physical_offset, sysflag, born_timestamp, born_host,
                              store_timestamp, store_host, reconsume_times, prepared_tx_offset,
                              crc_tail)
