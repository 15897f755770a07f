"""MessageStore behaviour on tiny segments: append, read, scan, queues, index, retention."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from broker_lite.errors import (
    InvalidMessageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
)
from broker_lite.storage import MessageStore, MessageToStore, TxType, tag_hash
from tests.broker_lite.storage.storage_support import Opener, body_for, message_for, tiny_config

pytestmark = pytest.mark.timeout(60)


def _fill(store: MessageStore, count: int) -> list[int]:
    return [store.put(message_for(seq)).physical_offset for seq in range(count)]


def test_append_read_scan_across_many_segments(open_store: Opener) -> None:
    store = open_store()
    offsets = _fill(store, 600)
    segments = list((Path(store.config.data_dir) / "commitlog").iterdir())
    assert len(segments) > 20, "tiny segments should roll over many times"
    for seq, offset in enumerate(offsets):
        record = store.get(offset)
        assert record.body == body_for(seq)
        assert record.physical_offset == offset
    scanned = list(store.scan())
    assert [r.physical_offset for r in scanned] == offsets
    assert [r.queue_offset for r in scanned] == [seq // 3 for seq in range(600)]


def test_queue_offsets_and_tag_filter(open_store: Opener) -> None:
    store = open_store()
    _fill(store, 90)
    assert store.queue_offsets("Orders", 0) == (0, 30)
    records, next_offset = store.read_queue("Orders", 1, 0, 100)
    assert [r.body for r in records] == [body_for(s) for s in range(1, 90, 3)]
    assert next_offset == 30
    even, _ = store.read_queue("Orders", 0, 0, 100, tag_hashes=frozenset({tag_hash("even")}))
    assert {r.properties["TAGS"] for r in even} == {"even"}
    assert len(even) == 15


def test_key_index_finds_unique_and_user_keys(open_store: Opener) -> None:
    store = open_store()
    offsets = _fill(store, 200)
    for seq in (0, 57, 199):
        assert [r.physical_offset for r in store.lookup_key(f"u{seq}")] == [offsets[seq]]
        assert [r.physical_offset for r in store.lookup_key(f"k{seq}")] == [offsets[seq]]
    shared = store.lookup_key("shared", limit=500)
    assert sorted(r.physical_offset for r in shared) == offsets
    assert store.lookup_key("nobody") == []


def test_transaction_records_are_routed_by_type(open_store: Opener) -> None:
    """As RocketMQ's doAppend: PREPARED and ROLLBACK records get queue offset 0, no queue."""
    store = open_store()
    prepared = store.put(MessageToStore(
        topic="RMQ_SYS_TRANS_HALF_TOPIC", body=b"half", sysflag=TxType.PREPARED,
        properties={"UNIQ_KEY": "tx-0"}))
    half = store.put(MessageToStore(  # RocketMQ stores a half with the transaction bits cleared
        topic="RMQ_SYS_TRANS_HALF_TOPIC", body=b"half",
        properties={"REAL_TOPIC": "Pay", "REAL_QID": "1", "UNIQ_KEY": "tx-1"}))
    commit = store.put(MessageToStore(
        topic="Pay", queue_id=1, body=b"half", sysflag=TxType.COMMIT,
        prepared_tx_offset=half.physical_offset, properties={"UNIQ_KEY": "tx-1"}))
    rollback = store.put(MessageToStore(
        topic="Pay", queue_id=1, body=b"", sysflag=TxType.ROLLBACK,
        properties={"UNIQ_KEY": "tx-2"}))
    assert store.queue_offsets("RMQ_SYS_TRANS_HALF_TOPIC", 0) == (0, 1)
    assert prepared.queue_offset == 0 and half.queue_offset == 0
    assert store.queue_units("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 9)[0].commitlog_offset == (
        half.physical_offset)
    records, _ = store.read_queue("Pay", 1, 0, 10)
    assert [r.physical_offset for r in records] == [commit.physical_offset]
    assert records[0].prepared_tx_offset == half.physical_offset
    assert rollback.queue_offset == 0
    assert store.get(rollback.physical_offset).tx_type == TxType.ROLLBACK
    assert {r.tx_type for r in store.lookup_key("tx-1")} == {TxType.NOT_TYPE, TxType.COMMIT}
    assert store.get(prepared.physical_offset).tx_type == TxType.PREPARED


@pytest.mark.parametrize("topic", ["", "has space", "x" * 128, "dot.ted", "ü"])
def test_bad_topic_is_rejected_and_nothing_written(open_store: Opener, topic: str) -> None:
    store = open_store()
    _fill(store, 3)
    before = store.max_offset
    with pytest.raises(InvalidMessageError, match="topic"):
        store.put(MessageToStore(topic=topic, body=b"x"))
    assert store.max_offset == before


def test_body_over_limit_is_rejected_and_nothing_written(open_store: Opener) -> None:
    store = open_store()
    offsets = _fill(store, 5)
    before = store.max_offset
    with pytest.raises(MessageTooLargeError) as info:
        store.put(MessageToStore(topic="Orders", body=b"x" * 2049))
    assert info.value.size == 2049 and info.value.limit == 2048
    assert "2049" in str(info.value) and "2048" in str(info.value)
    assert store.max_offset == before
    assert [store.get(o).body for o in offsets] == [body_for(s) for s in range(5)]


def test_record_bigger_than_a_segment_is_rejected(open_store: Opener) -> None:
    store = open_store(max_message_size=100_000)
    with pytest.raises(MessageTooLargeError):
        store.put(MessageToStore(topic="Orders", body=b"x" * 5000))
    assert store.max_offset == 0


def test_reserved_separator_in_property_is_rejected(open_store: Opener) -> None:
    store = open_store()
    with pytest.raises(InvalidMessageError, match="properties"):
        store.put(MessageToStore(topic="Orders", body=b"x", properties={"a": "b\x01c"}))
    assert store.max_offset == 0


def test_unknown_offset_is_out_of_range(open_store: Opener) -> None:
    store = open_store()
    _fill(store, 3)
    with pytest.raises(OffsetOutOfRangeError):
        store.get(store.max_offset)
    with pytest.raises(OffsetOutOfRangeError):
        store.get(-1)


def test_clean_restart_keeps_everything(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "s")
    with MessageStore(config) as store:
        offsets = _fill(store, 300)
    with MessageStore(config) as store:
        assert not store.recovery.crashed
        assert store.recovery.corruption is None
        assert [store.get(o).body for o in offsets] == [body_for(s) for s in range(300)]
        assert store.queue_offsets("Orders", 2) == (0, 100)
        nxt = store.put(message_for(300))
        assert nxt.physical_offset == store.get(nxt.physical_offset).physical_offset
        assert nxt.queue_offset == 100


def test_queues_and_index_are_rebuilt_from_the_log(tmp_path: Path) -> None:
    config = tiny_config(tmp_path / "s")
    with MessageStore(config) as store:
        offsets = _fill(store, 250)
    root = Path(config.data_dir)
    for sub in ("consumequeue", "index"):
        for path in sorted((root / sub).rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
    (root / "checkpoint").unlink()
    with MessageStore(config) as store:
        assert store.recovery.redispatched == 250
        for q in range(3):
            records, _ = store.read_queue("Orders", q, 0, 1000)
            assert [r.physical_offset for r in records] == offsets[q::3]
        assert [r.physical_offset for r in store.lookup_key("u123")] == [offsets[123]]


def test_layout_mismatch_is_refused(tmp_path: Path) -> None:
    with MessageStore(tiny_config(tmp_path / "s")):
        pass
    with pytest.raises(StorageError, match="segment_size=4096"):
        MessageStore(tiny_config(tmp_path / "s", segment_size=8192))


def test_retention_deletes_old_segments_but_never_the_active_one(open_store: Opener) -> None:
    store = open_store()
    offsets = _fill(store, 400)
    log_dir = Path(store.config.data_dir) / "commitlog"
    segments = sorted(log_dir.iterdir())
    old = time.time() - 100 * 3600
    for path in segments[: len(segments) // 2]:
        os.utime(path, (old, old))
    report = store.delete_expired()
    assert report.segments == len(segments) // 2
    assert report.queue_files > 0
    assert store.min_offset == int(segments[len(segments) // 2].name)
    with pytest.raises(OffsetOutOfRangeError):
        store.get(offsets[0])
    survivors = [o for o in offsets if o >= store.min_offset]
    assert [store.get(o).physical_offset for o in survivors] == survivors
    for q in range(3):
        low, high = store.queue_offsets("Orders", q)
        records, _ = store.read_queue("Orders", q, 0, 1000)
        assert all(r.physical_offset >= store.min_offset for r in records)
        assert high - low >= len(records) > 0
    # everything expired: the active segment still stays
    store.delete_expired(now=time.time() + 1000 * 3600)
    remaining = sorted(log_dir.iterdir())
    assert int(remaining[0].name) <= offsets[-1] < int(remaining[0].name) + 4096
    # beside it at most the next segment, made ahead of the roll-over: empty, not yet the log's
    assert [p.read_bytes() for p in remaining[1:]] in ([], [bytes(4096)])
    assert store.get(offsets[-1]).body == body_for(399)
    store.put(message_for(400))


def test_sync_flush_acknowledges_only_durable_records(open_store: Opener) -> None:
    store = open_store(flush="sync")
    results = [store.put(message_for(seq)) for seq in range(50)]
    assert store.flushed_offset >= results[-1].end_offset
