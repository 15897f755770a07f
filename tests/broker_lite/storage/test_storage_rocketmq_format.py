"""broker_lite's records against RocketMQ 5's, byte for byte, both ways.

``support.rocketmq_log`` is written from the Java source and shares no code
with broker_lite: what broker_lite writes must equal what it builds, and each
must read the other's segments.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import lz4.frame
import pytest
import zstandard

from broker_lite.errors import CorruptRecordError
from broker_lite.storage import CommitLog, Corruption, MessageStore, MessageToStore
from broker_lite.storage.body import inner_messages, message_body
from broker_lite.storage.properties import encode_properties
from broker_lite.storage.record import (
    MAGIC_V1,
    MAGIC_V2,
    decode_record,
    pack_host,
    verify_record,
)
from broker_lite.storage.record_encoder import encode_record
from tests.broker_lite.storage.storage_support import message_for, tiny_config
from tests.support import rocketmq_log as rmq

pytestmark = pytest.mark.timeout(60)


def _ours(msg: rmq.Message, queue_offset: int, offset: int, crc: bool) -> bytes:
    return encode_record(
        topic=msg.topic.encode(), body=msg.body, properties=encode_properties(msg.props),
        queue_id=msg.queue_id, flag=msg.flag, queue_offset=queue_offset,
        physical_offset=offset, sysflag=msg.sysflag, born_timestamp=msg.born_ts,
        born_host=pack_host(*msg.born_host), store_timestamp=msg.store_ts,
        store_host=pack_host(*msg.store_host), reconsume_times=msg.reconsume,
        prepared_tx_offset=msg.prepared_offset, crc_tail=crc)


CASES = {
    "plain": rmq.Message("Orders", b"hello", {"TAGS": "t", "UNIQ_KEY": "u1", "KEYS": "a b"}),
    "no-properties": rmq.Message("Orders", b"x" * 300),
    "empty-body": rmq.Message("Orders", b"", {"TAGS": "t"}),
    "topic-127": rmq.Message("T" * 127, b"v1 still", {"TAGS": "t"}),
    "topic-128": rmq.Message("T" * 128, b"v2 now", {"TAGS": "t"}),
    "ipv6-born": rmq.Message("Orders", b"six", {"A": "1"}, born_host=("2001:db8::5", 4000)),
    "ipv6-both": rmq.Message("Orders", b"six", {"A": "1"}, born_host=("::1", 1),
                             store_host=("fe80::2", 10911)),
    "commit": rmq.Message("Pay", b"c", {"TAGS": "t"}, queue_id=3, sysflag=rmq.COMMIT,
                          prepared_offset=4242, flag=7, reconsume=2),
    "prepared": rmq.Message("Pay", b"p", {"TAGS": "t"}, sysflag=rmq.PREPARED),
    "utf8": rmq.Message("Orders", "订单".encode(), {"键": "值 ✓"}),
}


@pytest.mark.parametrize("crc", [True, False], ids=["crc-tail", "no-tail"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_record_bytes_equal_rocketmqs(case: str, crc: bool) -> None:
    msg = CASES[case]
    queue_offset = 0 if msg.sysflag & 0xC == rmq.PREPARED else 17
    java = rmq.encode(msg, queue_offset, 123_456, crc)
    assert _ours(msg, queue_offset, 123_456, crc) == java
    record = decode_record(java, 0, require_tail=crc)
    assert record.magic == (MAGIC_V2 if len(msg.topic) > 127 else MAGIC_V1)
    assert (record.topic, record.body, record.properties) == (msg.topic, msg.body, msg.props)
    assert record.crc_tail is crc


def test_rocketmq_segments_with_blank_records_read_back(tmp_path: Path) -> None:
    log = rmq.RocketLog(tmp_path / "commitlog", 4096, crc_prop=False)
    placed = [log.put(rmq.Message("T" * (100 + i % 40), b"b%d" % i * (1 + i % 30),
                                  {"UNIQ_KEY": f"u{i}"}, queue_id=i % 2)) for i in range(60)]
    paths = log.write()
    assert len(paths) > 3
    reader = CommitLog(tmp_path / "commitlog", 4096, readonly=True)
    try:
        entries = list(reader.walk(0, end=1 << 62))
        assert not [e for e in entries if isinstance(e, Corruption)]
        records = [decode_record(e.segment.buffer, e.offset - e.segment.start_offset)
                   for e in entries if not isinstance(e, Corruption)]
    finally:
        reader.close()
    assert [r.physical_offset for r in records] == [p.offset for p in placed]
    assert [r.queue_offset for r in records] == [p.queue_offset for p in placed]
    assert {r.magic for r in records} == {MAGIC_V1, MAGIC_V2}
    blank = paths[0].read_bytes()
    last = max(p.offset + p.size for p in placed if p.offset < 4096)
    assert struct.unpack_from(">iI", blank, last) == (4096 - last, 0xCBD43194)


def test_broker_lite_segments_read_by_an_independent_decoder(tmp_path: Path) -> None:
    with MessageStore(tiny_config(tmp_path / "s", store_host="[::1]:10911")) as store:
        puts = [store.put(message_for(i)) for i in range(80)]
        store.put(MessageToStore(topic="Orders", body=b"v6", born_host=pack_host("::2", 9)))
    decoded = rmq.decode_dir(tmp_path / "s" / "commitlog", need_crc_prop=True)
    assert [d.offset for d in decoded[:80]] == [p.physical_offset for p in puts]
    for i, d in enumerate(decoded[:80]):
        expected = message_for(i)
        assert (d.topic, d.body, d.props) == (expected.topic, expected.body,
                                              dict(expected.properties))
        assert d.sysflag & 0x30 == 0x20 and d.magic == MAGIC_V1 and d.crc_checked
    assert decoded[80].sysflag & 0x30 == 0x30


@pytest.mark.parametrize(("kind", "bits", "pack"), [
    ("zlib", 0x300, zlib.compress), ("zlib-legacy", 0x000, zlib.compress),
    ("lz4", 0x100, lz4.frame.compress), ("zstd", 0x200, zstandard.ZstdCompressor().compress),
])
def test_compressed_bodies_are_read(kind: str, bits: int, pack: object) -> None:
    plain = b"compress me " * 50
    packed = pack(plain)  # type: ignore[operator]
    data = rmq.encode(rmq.Message("Z", packed, {"TAGS": "z"}, sysflag=0x1 | bits), 0, 0, False)
    record = decode_record(data, 0)
    assert record.body == packed and message_body(record) == plain


def test_unknown_compression_type_names_the_offset_and_the_flag() -> None:
    data = rmq.encode(rmq.Message("Z", b"??", sysflag=0x1 | 0x500), 0, 8192, False)
    record = decode_record(data, 0)
    with pytest.raises(CorruptRecordError) as info:
        message_body(record)
    assert "offset 8192" in str(info.value) and "0x501" in str(info.value)
    assert "compression type 5" in str(info.value)


def test_inner_batch_is_unwrapped() -> None:
    def inner(flag: int, body: bytes, props: dict[str, str]) -> bytes:
        p = rmq.props_string(props)
        size = 20 + len(body) + 2 + len(p)
        return struct.pack(">iiiii", size, 0, 0, flag, len(body)) + body \
            + struct.pack(">h", len(p)) + p  # MessageDecoder.encodeMessage

    batch = inner(1, b"one", {"UNIQ_KEY": "a"}) + inner(2, b"two", {})
    data = rmq.encode(rmq.Message("B", batch, {"INNER_NUM": "2"}, sysflag=0x80 | 0x40),
                      0, 0, True)
    inner_list = inner_messages(decode_record(data, 0))
    assert [(m.flag, m.body, m.properties) for m in inner_list] == [
        (1, b"one", {"UNIQ_KEY": "a"}), (2, b"two", {})]
    broken = rmq.encode(rmq.Message("B", batch[:-3], sysflag=0xC0), 0, 64, False)
    with pytest.raises(CorruptRecordError, match=r"offset 64.*inner batch"):
        inner_messages(decode_record(broken, 0))


def test_a_record_without_its_crc_tail_is_refused_where_one_is_required() -> None:
    data = rmq.encode(CASES["plain"], 0, 0, False)
    assert verify_record(data, 0, len(data))[2:] == ("",)  # type: ignore[index]
    assert verify_record(data, 0, len(data), require_tail=True) == (
        "record CRC property (__CRC32#) missing")
    tailed = bytearray(rmq.encode(CASES["plain"], 0, 0, True))
    tailed[30] ^= 1  # the physical offset: only the tail's CRC covers it
    assert verify_record(bytes(tailed), 0, len(tailed)) == "record CRC mismatch"
