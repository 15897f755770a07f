"""A full disk: the write that cannot get space fails cleanly and nothing stored is lost.

The disk is a tiny tmpfs mounted for the test (root only; CI runs as root).
Segments, queue files and index files are preallocated before a record is
written, so the failure happens before any byte of the record lands.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_lite.errors import DiskFullError
from broker_lite.storage import MessageStore
from tests.broker_lite.storage.storage_support import body_for, message_for, tiny_config
from tests.support.small_disk import mounted_tmpfs

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "256k") as mount_point:
        yield mount_point


def test_full_disk_fails_the_write_and_keeps_every_stored_record(small_disk: Path) -> None:
    config = tiny_config(small_disk / "store")
    store = MessageStore(config)
    offsets: list[int] = []
    with pytest.raises(DiskFullError) as info:
        for seq in range(100_000):
            offsets.append(store.put(message_for(seq)).physical_offset)
    assert info.value.retriable
    assert "no space" in str(info.value)
    assert len(offsets) > 50
    end = store.max_offset
    with pytest.raises(DiskFullError):
        store.put(message_for(len(offsets)))
    assert store.max_offset == end
    assert [store.get(o).body for o in offsets] == [body_for(s) for s in range(len(offsets))]
    store.close()

    with MessageStore(config) as reopened:
        assert reopened.recovery.corruption is None
        assert reopened.max_offset == end
        assert [reopened.get(o).body for o in offsets] == [
            body_for(s) for s in range(len(offsets))
        ]
