"""ConsumeQueue: the per-(topic, queue id) index into the CommitLog.

Each unit is 20 bytes, as in RocketMQ: commit-log offset (8), record size (4)
and tag hash (8). The n-th unit is the message at queue offset n. Units are
kept in mapped files of ``units_per_file`` units, named by the 20-digit byte
offset of their first unit. The dispatcher builds them from the log, so they
can always be rebuilt; a unit whose size is 0 has never been written.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from broker_lite.storage.mapped_file import MappedFile, MappedFileQueue

__all__ = ["UNIT_SIZE", "ConsumeQueue", "QueueUnit"]

_UNIT = struct.Struct(">qiq")
UNIT_SIZE = _UNIT.size  # 20


class QueueUnit(NamedTuple):
    """One consume-queue entry (a named tuple: a pull reads one per message)."""

    queue_offset: int
    commitlog_offset: int
    size: int
    tag_hash: int


class ConsumeQueue:
    """The units of one queue of one topic. The store serialises writes."""

    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.files = MappedFileQueue(directory, units_per_file * UNIT_SIZE)
        self._min_unit = self.files.min_offset // UNIT_SIZE
        self._max_unit = self._min_unit
        self._load()

    def _load(self) -> None:
        """Find the first never-written unit (binary search in the last file)."""
        last = self.files.last_file()
        if last is None:
            return
        buf = last.buffer
        lo, hi = 0, self.units_per_file
        while lo < hi:
            mid = (lo + hi) // 2
            if _UNIT.unpack_from(buf, mid * UNIT_SIZE)[1] != 0:
                lo = mid + 1
            else:
                hi = mid
        last.wrote_position = last.flushed_position = lo * UNIT_SIZE
        for mf in self.files.files[:-1]:
            mf.wrote_position = mf.flushed_position = mf.file_size
        self._max_unit = (last.start_offset + lo * UNIT_SIZE) // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        """The smallest queue offset still stored (raised by retention)."""
        return self._min_unit

    @property
    def max_offset(self) -> int:
        """The queue offset the next unit gets."""
        return self._max_unit

    def append(self, queue_offset: int, commitlog_offset: int, size: int, tag_hash: int) -> None:
        """Write the unit for ``queue_offset``; it must be the next one."""
        self.write_unit(self.prepare(queue_offset), queue_offset, commitlog_offset, size,
                        tag_hash)

    def write_unit(self, mf: MappedFile, queue_offset: int, commitlog_offset: int, size: int,
                   tag_hash: int) -> None:
        """Write a unit into the file :meth:`prepare` returned for ``queue_offset``."""
        pos = mf.wrote_position
        _UNIT.pack_into(mf.writable(), pos, commitlog_offset, size, tag_hash)
        mf.wrote_position = pos + UNIT_SIZE
        self._max_unit = queue_offset + 1

    def room_for(self, count: int) -> MappedFile | None:
        """The file the next ``count`` units all go to, when it exists and holds them all
        (the common case); ``None`` otherwise (:meth:`prepare` them one by one)."""
        files = self.files.files
        if self._max_unit == self._min_unit or not files:
            return None
        current = files[-1]
        first = self._max_unit * UNIT_SIZE - current.start_offset
        if first >= 0 and first + count * UNIT_SIZE <= current.file_size:
            return current
        return None

    def write_units(self, mf: MappedFile, units: list[tuple[int, int, int]]) -> None:
        """Write ``(commitlog offset, size, tag hash)`` units from :meth:`max_offset` on,
        into the file :meth:`room_for` returned for them."""
        buf = mf.writable()
        pos = mf.wrote_position
        pack = _UNIT.pack_into
        for commitlog_offset, size, tag_hash in units:
            pack(buf, pos, commitlog_offset, size, tag_hash)
            pos += UNIT_SIZE
        mf.wrote_position = pos
        self._max_unit += len(units)

    def prepare(self, queue_offset: int) -> MappedFile:
        """Make sure the file for ``queue_offset`` exists (may raise DiskFullError).

        An empty queue may start at any offset (a queue rebuilt after
        retention trimmed the log); otherwise units must come in order.
        """
        byte_offset = queue_offset * UNIT_SIZE
        files = self.files.files
        if queue_offset == self._max_unit != self._min_unit and files:  # the common case
            current = files[-1]
            if 0 <= byte_offset - current.start_offset < current.file_size:
                return current
        empty = self._max_unit == self._min_unit
        if queue_offset != self._max_unit and not (empty and queue_offset > self._max_unit):
            raise ValueError(
                f"{self.topic}/{self.queue_id}: unit {queue_offset} out of order, "
                f"expected {self._max_unit}"
            )
        mf = self.files.last_file()
        if mf is None or not mf.start_offset <= byte_offset < mf.end_offset:
            if mf is not None and byte_offset < mf.end_offset:
                raise ValueError(f"{self.topic}/{self.queue_id}: unit {queue_offset} behind files")
            mf = self.files.new_file(byte_offset - byte_offset % self.files.file_size)
        if empty:
            self._min_unit = self._max_unit = queue_offset
            mf.wrote_position = byte_offset - mf.start_offset
        return mf

    def get(self, queue_offset: int) -> QueueUnit | None:
        """The unit at ``queue_offset``, or ``None`` when outside what is stored."""
        if not self._min_unit <= queue_offset < self._max_unit:
            return None
        byte_offset = queue_offset * UNIT_SIZE
        mf = self.files.find(byte_offset)
        if mf is None:
            return None
        phys, size, tag = _UNIT.unpack_from(mf.buffer, byte_offset - mf.start_offset)
        return QueueUnit(queue_offset, phys, size, tag)

    def range(self, start: int, limit: int) -> Iterator[QueueUnit]:
        """Up to ``limit`` units from ``start`` (clamped to what is stored)."""
        offset = max(start, self._min_unit)
        end = min(self._max_unit, offset + limit)
        while offset < end:
            byte_offset = offset * UNIT_SIZE
            mf = self.files.find(byte_offset)
            if mf is None:
                return
            pos = byte_offset - mf.start_offset
            stop = min(end, (mf.end_offset // UNIT_SIZE))
            for phys, size, tag in _UNIT.iter_unpack(
                mf.buffer[pos : pos + (stop - offset) * UNIT_SIZE]
            ):
                yield QueueUnit(offset, phys, size, tag)
                offset += 1

    def last_commitlog_offset(self) -> int:
        """The commit-log offset of the newest unit, or -1 when empty."""
        unit = self.get(self._max_unit - 1)
        return unit.commitlog_offset if unit else -1

    def truncate_dirty(self, log_end: int) -> None:
        """Drop units pointing at or past ``log_end`` (after the log was truncated)."""
        new_max = self._max_unit
        while new_max > self._min_unit:
            unit = self.get(new_max - 1)
            if unit is None or unit.commitlog_offset + unit.size <= log_end:
                break
            new_max -= 1
        if new_max != self._max_unit:
            byte_offset = new_max * UNIT_SIZE
            self.files.truncate_from(byte_offset)
            if not self.files.files:
                self._min_unit = new_max
            self._max_unit = new_max
            last = self.files.last_file()
            if last is not None:
                last.wrote_position = min(last.wrote_position, byte_offset - last.start_offset)

    def delete_below(self, min_commitlog_offset: int) -> int:
        """Delete whole files whose units all point below the log's new start.

        The last file always stays. Returns how many files went.
        """
        deleted = 0
        while len(self.files.files) > 1:
            first = self.files.files[0]
            last_unit = (first.end_offset // UNIT_SIZE) - 1
            unit = self.get(last_unit)
            if unit is None or unit.commitlog_offset >= min_commitlog_offset:
                break
            self.files.delete_first()
            deleted += 1
            self._min_unit = self.files.min_offset // UNIT_SIZE
        # Units in the remaining first file that point below the log are skipped.
        while self._min_unit < self._max_unit:
            unit = self.get(self._min_unit)
            if unit is None or unit.commitlog_offset >= min_commitlog_offset:
                break
            self._min_unit += 1
        return deleted

    def flush(self) -> None:
        self.files.flush()

    def close(self) -> None:
        self.files.close()
