"""The key index on its own: chains, rollover, and the state a crash mid-put leaves."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker_lite.storage.key_index import IndexFile, KeyIndex, key_hash

pytestmark = pytest.mark.timeout(30)


def test_chains_hold_every_key_across_file_rollover(tmp_path: Path) -> None:
    index = KeyIndex(tmp_path, slot_count=8, max_entries=20)
    for n in range(100):
        keys = [f"key-{n}", "shared"]
        index.prepare(len(keys), n * 100)
        index.put(keys, n * 100, 1_700_000_000_000 + n)
    assert len(index.files) == 10
    for n in (0, 41, 99):
        assert n * 100 in index.candidates(f"key-{n}")
    assert sorted(index.candidates("shared", limit=1000)) == [n * 100 for n in range(100)]
    index.close()
    reopened = KeyIndex(tmp_path, slot_count=8, max_entries=20)
    assert reopened.indexed_up_to() == 9900
    assert 4100 in reopened.candidates("key-41")


def test_entries_past_the_saved_header_do_not_cut_the_chain(tmp_path: Path) -> None:
    """The header is saved at checkpoints; a crash leaves entries and slots past its count."""
    path = tmp_path / "00000000000000000000"
    index_file = IndexFile(path, 0, slot_count=1, max_entries=50)  # one slot: one chain
    for n in range(5):
        index_file.put(f"old-{n}", n * 10, 1_700_000_000_000)
    index_file.flush()  # a checkpoint: header says 5 entries
    # A put after it, killed before the next checkpoint: entry 6 and the slot, no header.
    buf = index_file.file.buffer
    entries_at = 40 + 4
    struct.pack_into(">iqii", buf, entries_at + 6 * 20, key_hash("torn"), 60, 0, 5)
    struct.pack_into(">i", buf, 40, 6)
    index_file.file.close()

    reopened = IndexFile(path, 0, slot_count=1, max_entries=50)
    assert reopened.count == 5
    assert reopened.candidates("old-0", 10) == [0]
    assert reopened.candidates("torn", 10) == []
    reopened.put("again", 60, 1_700_000_000_000)  # the re-dispatch of the torn record
    assert reopened.candidates("again", 10) == [60]
    assert reopened.candidates("old-3", 10) == [30]
    assert reopened.candidates("old-0", 10) == [0]


@pytest.mark.timeout(60)
def test_index_files_made_since_the_last_flush_are_rebuilt_after_a_crash(tmp_path: Path) -> None:
    """A crash before the index's first flush: its files on disk count no entry. Recovery
    re-indexes every record; none may be lost, and no two files may share a name."""
    from broker_lite.storage import MessageStore
    from tests.broker_lite.storage.storage_support import message_for, tiny_config

    config = tiny_config(tmp_path / "store", flush_interval=3600, checkpoint_interval=3600,
                         segment_size=1 << 20)
    crashed = MessageStore(config)  # never closed: as if killed before any checkpoint
    offsets = {f"u{seq}": crashed.put_nowait(message_for(seq)).physical_offset
               for seq in range(300)}  # 3 keys a record, 64 entries a file: 15 files
    assert len(crashed._index.files) > 10
    reopened = MessageStore(config)
    try:
        assert reopened.recovery.crashed and reopened.recovery.checkpoint is None
        names = [f.file.path.name for f in reopened._index.files]
        assert len(names) == len(set(names)) == len(list((tmp_path / "store/index").iterdir()))
        assert {key: [r.physical_offset for r in reopened.lookup_key(key)]
                for key in offsets} == {key: [offset] for key, offset in offsets.items()}
        assert len(reopened.lookup_key("shared", limit=1000)) == 300
    finally:
        reopened.close()
