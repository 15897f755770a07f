"""Appends that take no first-touch page fault, the next segment made ahead, and recovery.

A batch that fits is written with one ``pwrite`` into the page cache, not
through the segment's mapping, so appending never faults a page of the
mapping in (checked on the mapping's resident size in ``/proc/self/smaps``);
readers still see every byte through the mapping, nothing past the write
position is ever non-zero, and a reopen recovers exactly what was stored. The
segment after the current one is made (preallocated, mapped) by the flusher
ahead of the roll-over: it holds only zeros, the roll-over takes that very file,
and a crash image with one made ahead recovers exactly the acknowledged records
and drops it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from broker_lite.storage import MessageStore, MessageToStore, PutResult, StoreConfig
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

SEGMENT = 1 << 20
BODY = bytes(range(256)) * 4  # 1 KiB, no zero run long enough to hide a lost write


def _config(data_dir: Path, **overrides: object) -> StoreConfig:
    values: dict[str, object] = dict(data_dir=data_dir, segment_size=SEGMENT, flush="sync",
                                     flush_interval=0.05, checkpoint_interval=0.05)
    values.update(overrides)
    return StoreConfig(**values)  # type: ignore[arg-type]


def _batch(start: int, count: int = 64) -> list[MessageToStore]:
    return [MessageToStore(topic="Warm", body=BODY, queue_id=seq % 2,
                           properties={"UNIQ_KEY": f"u{seq:08d}", "TAGS": "t"})
            for seq in range(start, start + count)]


def _resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of ``path`` (``/proc/self/smaps``)."""
    total = 0
    inside = False
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                inside = line.rstrip("\n").endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def _whole(path: Path, size: int) -> bool:
    """``path`` exists at its full preallocated ``size``."""
    try:
        return path.stat().st_size == size
    except FileNotFoundError:
        return False


def _segment(data_dir: Path) -> Path:
    return data_dir / "commitlog" / "00000000000000000000"


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc smaps")
def test_a_batch_append_never_faults_a_page_of_the_segment_mapping_in(tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    results: list[PutResult] = []
    with MessageStore(_config(data_dir)) as store:
        resident_before = 0
        for start in range(0, 640, 64):  # 10 batches, ~760 KiB: every one fits the segment
            outcome = store.put_batch_nowait(_batch(start))
            assert all(isinstance(r, PutResult) for r in outcome)
            results += outcome  # type: ignore[arg-type]
            assert store.wait_flushed(results[-1].end_offset, timeout=30)
            if start == 0:  # the first batch makes the segment and the queues, record by record
                resident_before = _resident_kib(_segment(data_dir))
        written = store.max_offset
        assert written > SEGMENT // 2
        # the nine batches after it faulted nothing in through the mapping (a write through
        # it leaves each page it touched resident: ~170 pages here)
        resident = _resident_kib(_segment(data_dir))
        assert resident <= resident_before + 4, "the batches wrote through the mapping"
        # and readers, who do read through the mapping, see every record
        for seq, result in enumerate(results):
            record = store.get(result.physical_offset)
            assert record.body == BODY
            assert record.properties["UNIQ_KEY"] == f"u{seq:08d}"
        assert [r.queue_offset for r in results[:4]] == [0, 0, 1, 1]
        assert store.queue_offsets("Warm", 0) == (0, 320)
        assert [r.physical_offset for r in store.lookup_key("u00000100")] == [
            results[100].physical_offset]
    raw = _segment(data_dir).read_bytes()
    assert raw[written:] == bytes(SEGMENT - written), "non-zero bytes past the write position"
    with MessageStore(_config(data_dir)) as reopened:
        assert reopened.max_offset == written
        assert [r.physical_offset for r in reopened.scan()] == [
            r.physical_offset for r in results]


def test_the_next_segment_is_made_ahead_empty_and_a_crash_image_recovers_without_it(
        tmp_path: Path) -> None:
    data_dir = tmp_path / "store"
    seg = 64 * 1024
    config = _config(data_dir, segment_size=seg)
    store = MessageStore(config)
    try:
        acked: list[PutResult] = []

        def put(start: int, count: int) -> None:
            outcome = store.put_batch_nowait(_batch(start, count))
            acked.extend(r for r in outcome if isinstance(r, PutResult))
            assert len(acked) == start + count
            assert store.wait_flushed(acked[-1].end_offset, timeout=30)

        put(0, 32)  # ~37 KiB: the first segment is past half full
        spare = data_dir / "commitlog" / f"{seg:020d}"
        # the file appears (created) a moment before it is preallocated: wait for it whole
        wait_until(lambda: _whole(spare, seg), timeout=30,
                   message="the next segment was not made ahead")
        assert store.max_offset < seg, "made ahead, but not part of the log"
        assert spare.read_bytes() == bytes(seg), "a segment made ahead holds only zeros"
        made_ahead = spare.stat().st_ino
        put(32, 40)  # rolls over into it
        assert store.max_offset > seg
        assert spare.stat().st_ino == made_ahead, "the roll-over made a new file"
        put(72, 20)  # the second segment past half full
        # a crash image (what kill -9 leaves: the files as the page cache holds them),
        # taken once the segment after the second one was made ahead too
        third = data_dir / "commitlog" / f"{2 * seg:020d}"
        wait_until(lambda: _whole(third, seg), timeout=30,
                   message="the third segment was not made ahead")
        image = tmp_path / "image"
        shutil.copytree(data_dir, image)
    finally:
        store.close()
    assert not third.exists(), "close leaves no segment made ahead behind"
    assert (image / "commitlog" / third.name).read_bytes() == bytes(seg)
    with MessageStore(_config(image, segment_size=seg)) as reopened:
        assert reopened.recovery.crashed
        assert reopened.max_offset == acked[-1].end_offset
        assert [r.physical_offset for r in reopened.scan()] == [
            r.physical_offset for r in acked]
        assert reopened.queue_offsets("Warm", 1) == (0, 46)
        assert not (image / "commitlog" / third.name).exists(), "recovery keeps no empty tail"
        reopened.put_batch_nowait(_batch(92, 2))  # and the log goes on where it stopped
        assert reopened.max_offset > acked[-1].end_offset
