"""Round trips and corruption detection for the commit-log record codec."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from broker_lite.storage.properties import encode_properties
from broker_lite.storage.record import (
    MAGIC_V1,
    MAGIC_V2,
    decode_record,
    pack_host,
    sysflag_name,
    tag_hash,
    verify_record,
)
from broker_lite.storage.record_encoder import encode_record

pytestmark = pytest.mark.timeout(120)

FOUR_MIB = 4 * 1024 * 1024
_prop_text = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=40,
)
_sysflags = st.sampled_from([0, 4, 8, 12]).flatmap(
    lambda tx: st.sampled_from([tx, tx | 1, tx | 2, tx | 3])
)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


def _encode(topic: str, body: bytes, props: dict[str, str], sysflag: int, **nums: int) -> bytes:
    return encode_record(
        topic=topic.encode("utf-8"),
        body=body,
        properties=encode_properties(props),
        queue_id=nums.get("queue_id", 3),
        flag=nums.get("flag", 0),
        queue_offset=nums.get("queue_offset", 7),
        physical_offset=nums.get("physical_offset", 4096),
        sysflag=sysflag,
        born_timestamp=nums.get("born", 1_700_000_000_000),
        born_host=pack_host("10.0.0.1", 5555),
        store_timestamp=nums.get("store", 1_700_000_000_123),
        store_host=pack_host("127.0.0.1", 10911),
        reconsume_times=nums.get("reconsume", 0),
        prepared_tx_offset=nums.get("prepared", 0),
    )


@settings(max_examples=300, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=60).filter(lambda t: len(t.encode("utf-8")) < 65000),
    body=st.binary(max_size=2048),
    props=st.dictionaries(_prop_text.filter(bool), _prop_text, max_size=6),
    sysflag=_sysflags,
    queue_id=_i32,
    flag=_i32,
    queue_offset=_i64,
    physical_offset=_i64,
    reconsume=_i32,
    prepared=_i64,
)
@example(topic="T", body=b"", props={}, sysflag=0, queue_id=0, flag=0, queue_offset=0,
         physical_offset=0, reconsume=0, prepared=0)
@example(topic="订单-主题", body=b"\x00" * 10, props={"键": "值 ✓", "TAGS": "标签"}, sysflag=8,
         queue_id=1, flag=2, queue_offset=3, physical_offset=4, reconsume=5, prepared=6)
def test_round_trip(topic: str, body: bytes, props: dict[str, str], sysflag: int,
                    queue_id: int, flag: int, queue_offset: int, physical_offset: int,
                    reconsume: int, prepared: int) -> None:
    data = _encode(topic, body, props, sysflag, queue_id=queue_id, flag=flag,
                   queue_offset=queue_offset, physical_offset=physical_offset,
                   reconsume=reconsume, prepared=prepared)
    checked = verify_record(data, 0, len(data))
    magic = MAGIC_V1 if len(topic.encode("utf-8")) <= 127 else MAGIC_V2
    assert checked == (len(data), magic, "")
    record = decode_record(data, 0)
    assert record.topic == topic
    assert record.body == body
    assert record.properties == props
    assert record.sysflag == sysflag
    assert (record.queue_id, record.flag, record.queue_offset) == (queue_id, flag, queue_offset)
    assert record.physical_offset == physical_offset
    assert (record.reconsume_times, record.prepared_tx_offset) == (reconsume, prepared)
    assert record.total_size == len(data)
    assert sysflag_name(sysflag).split("+")[0] in {"normal", "prepared", "commit", "rollback"}


def test_four_mib_body_round_trips() -> None:
    body = bytes(range(256)) * (FOUR_MIB // 256)
    data = _encode("Big", body, {"KEYS": "a b"}, 0)
    record = decode_record(data, 0)
    assert record.body == body
    assert record.keys == ["a", "b"]


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_flipped_byte_is_detected(data: st.DataObject) -> None:
    raw = bytearray(_encode("FlipTopic", b"payload-" * 20, {"TAGS": "t", "UNIQ_KEY": "u1"}, 8))
    index = data.draw(st.integers(0, len(raw) - 1), label="index")
    mask = data.draw(st.integers(1, 255), label="mask")
    raw[index] ^= mask
    assert isinstance(verify_record(bytes(raw), 0, len(raw), require_tail=True), str)
    with pytest.raises(ValueError):
        decode_record(bytes(raw), 0, require_tail=True)


@given(cut=st.integers(0, 300))
def test_truncated_record_is_detected(cut: int) -> None:
    raw = _encode("Cut", b"x" * 200, {"TAGS": "t"}, 0)
    short = raw[: len(raw) - 1 - cut]
    assert isinstance(verify_record(short, 0, len(short)), str)


def test_tag_hash_matches_java_string_hashcode() -> None:
    # Values of java.lang.String#hashCode, which RocketMQ stores in consume queues.
    assert tag_hash("TagA") == 2598919
    assert tag_hash("created") == 1028554472
    assert tag_hash("a" * 20) == 1542361408  # overflows and wraps as Java int does
    assert tag_hash("订单") == 1129459
    assert tag_hash("\U0001F600") == 1772899  # a surrogate pair: two UTF-16 units
    assert tag_hash(None) == 0
