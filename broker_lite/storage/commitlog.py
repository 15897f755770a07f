"""The CommitLog: every record of every topic, appended to segmented files.

Segments are :class:`MappedFile` s of ``segment_size`` bytes named by their
20-digit start offset. A record that does not fit in what is left of a segment
is preceded by a blank end-of-file record filling the rest, and goes at the
start of the next segment. A physical offset is the position of a record in
the endless address space the segments cover.

The CommitLog itself takes no lock: :class:`MessageStore` serialises appends.
Reads may run from any thread while appends go on.

The segment after the current one is made ahead of its use (RocketMQ's
``AllocateMappedFileService``): once the current one is half full, the flusher
thread calls :meth:`CommitLog.prepare_next`, which preallocates and maps it
(``posix_fallocate`` of a whole segment, off the append path). The roll-over
then takes it, so no append waits for a new file. Until then it is all zeros and
no part of the log: a reopen (recovery truncates at the end of written data)
deletes it, and so does :meth:`CommitLog.close`.
"""

from __future__ import annotations

import logging
import mmap
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from broker_lite.errors import (
    BrokerError,
    ConfigurationError,
    CorruptRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from broker_lite.storage.mapped_file import MappedFile, MappedFileQueue, segment_name
from broker_lite.storage.record import (
    BLANK_MAGIC,
    MIN_BLANK_SIZE,
    StoredRecord,
    decode_record,
    verify_record,
)

__all__ = ["CommitLog", "Corruption", "ScanEntry"]

_BLANK = struct.Struct(">II")
log = logging.getLogger("broker_lite.storage")


@dataclass(frozen=True, slots=True)
class Corruption:
    """Where a log stops being sound, and why."""

    offset: int
    reason: str
    segment: str


class ScanEntry(NamedTuple):
    """One sound record met by :meth:`CommitLog.walk` (a tuple: cheap to make)."""

    offset: int
    size: int
    segment: MappedFile


class CommitLog:
    """Segmented append-only log of records."""

    def __init__(self, directory: Path, segment_size: int, *, readonly: bool = False,
                 require_crc_tail: bool = False) -> None:
        if segment_size < 4096:
            raise ConfigurationError(
                f"segment_size must be at least 4096 bytes, got {segment_size}",
                setting="segment_size")
        self.segment_size = segment_size
        #: every record must carry RocketMQ's ``__CRC32#`` tail (a store that writes it)
        self.require_crc_tail = require_crc_tail
        self.queue = MappedFileQueue(directory, segment_size, readonly=readonly)
        self._write_offset = self.queue.min_offset
        self._flushed_offset = self._write_offset
        #: the next segment, made ahead of the roll-over (:meth:`prepare_next`)
        self._spare: MappedFile | None = None
        #: held while the spare is made or taken, and while a roll-over adds a segment
        self._spare_lock = threading.Lock()

    # -- positions ---------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self.queue.min_offset

    @property
    def max_offset(self) -> int:
        """The offset the next record goes to: everything below is readable."""
        return self._write_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def max_record_size(self) -> int:
        return self.segment_size - MIN_BLANK_SIZE

    # -- writing -------------------------------------------------------------

    def reserve(self, size: int) -> int:
        """Make room for a record of ``size`` bytes; return its physical offset.

        Rolls over to a new segment (writing the blank end-of-file record) when
        the current one cannot hold it. Must be followed by :meth:`write` of
        exactly ``size`` bytes, under the same caller lock.
        """
        if size > self.max_record_size:
            raise MessageTooLargeError(size=size, limit=self.max_record_size)
        mf = self.queue.last_file()
        if mf is None:
            mf = self.queue.new_file(self._write_offset)
        elif mf.remaining() - MIN_BLANK_SIZE < size:
            full = mf
            mf = self._next_segment(full.end_offset)  # may raise; nothing written yet
            full.write(_BLANK.pack(full.remaining(), BLANK_MAGIC))
            full.wrote_position = full.file_size
            self._write_offset = mf.start_offset
        return mf.start_offset + mf.wrote_position

    def _next_segment(self, start_offset: int) -> MappedFile:
        """The segment starting at ``start_offset``, made now unless it was made ahead."""
        with self._spare_lock:
            spare, self._spare = self._spare, None
            if spare is not None and spare.start_offset == start_offset:
                self.queue.files.append(spare)
                return spare
            if spare is not None:  # made for another offset (cannot happen): not a segment
                spare.destroy()
            return self.queue.new_file(start_offset)

    def prepare_next(self) -> bool:
        """Make the segment after the current one, if the current one is half full and
        it is not made yet; ``True`` if this call made it. From the flusher thread.

        Runs without the store's lock: a roll-over meanwhile waits for it (on the
        spare lock) and then takes it. A failure (a full disk) is left for the
        roll-over to meet and report.
        """
        current = self.queue.last_file()
        if (self.queue.readonly or current is None or self._spare is not None
                or current.wrote_position < current.file_size // 2):
            return False
        with self._spare_lock:
            if self._spare is not None or self.queue.last_file() is not current:
                return False
            path = self.queue.directory / segment_name(current.end_offset)
            try:
                self._spare = MappedFile(path, self.segment_size, current.end_offset)
            except (BrokerError, OSError) as exc:
                log.debug("next segment %s not made ahead: %s", path.name, exc)
                return False
        return True

    def reserve_at(self, size: int) -> tuple[int, mmap.mmap, int]:
        """:meth:`reserve`, plus the segment's mapping and the position the record goes to.

        The caller encodes the record there in place, then calls :meth:`advance`
        with ``size``, under the same lock.
        """
        files = self.queue.files
        if files:  # the common case first: the record fits in the current segment
            mf = files[-1]
            pos = mf.wrote_position
            if mf.file_size - pos - MIN_BLANK_SIZE >= size:
                return mf.start_offset + pos, mf.writable(), pos
        offset = self.reserve(size)
        mf = self.queue.files[-1]
        return offset, mf.writable(), mf.wrote_position

    def current_segment(self, size: int) -> MappedFile | None:
        """The segment ``size`` more bytes go to without a roll-over; ``None`` if they
        do not fit in it (or there is none yet). Records are then encoded one after
        another at its write position, each published with :meth:`advance`."""
        files = self.queue.files
        if files:
            mf = files[-1]
            if mf.file_size - mf.wrote_position - MIN_BLANK_SIZE >= size:
                return mf
        return None

    def advance(self, size: int) -> None:
        """Publish the ``size`` bytes just encoded at the position :meth:`reserve_at` gave."""
        mf = self.queue.files[-1]
        mf.wrote_position += size
        self._write_offset = mf.start_offset + mf.wrote_position

    def write(self, data: bytes) -> int:
        """Append the bytes of a record whose offset :meth:`reserve` gave."""
        mf = self.queue.files[-1]
        pos = mf.write(data)
        self._write_offset = mf.start_offset + mf.wrote_position
        return mf.start_offset + pos

    def flush(self) -> int:
        """``fdatasync`` every segment with unflushed bytes; return the durable offset."""
        target = self._write_offset
        for mf in list(self.queue.files):
            if mf.end_offset <= self._flushed_offset:
                continue
            mf.flush()
        self._flushed_offset = max(self._flushed_offset, target)
        return target

    # -- reading -------------------------------------------------------------

    def _locate(self, offset: int) -> MappedFile:
        if not self.min_offset <= offset < self._write_offset:
            raise OffsetOutOfRangeError(
                offset=offset, min_offset=self.min_offset, max_offset=self._write_offset
            )
        mf = self.queue.find(offset)
        if mf is None:
            raise OffsetOutOfRangeError(
                offset=offset, min_offset=self.min_offset, max_offset=self._write_offset
            )
        return mf

    def read(self, offset: int) -> StoredRecord:
        """The record at ``offset``, checked against both its CRCs."""
        mf = self._locate(offset)
        pos = offset - mf.start_offset
        checked = verify_record(mf.buffer, pos, mf.limit, self.require_crc_tail)
        if isinstance(checked, str):
            raise CorruptRecordError(checked, offset=offset)
        if checked[1] == BLANK_MAGIC:
            raise CorruptRecordError("offset points at a blank end-of-file record", offset=offset)
        return decode_record(mf.buffer, pos, verified=True)

    def read_raw(self, offset: int, size: int) -> bytes:
        """The raw bytes of a record (for byte-identical checks and replication)."""
        mf = self._locate(offset)
        pos = offset - mf.start_offset
        return mf.read(pos, size)

    def scan(self, start: int | None = None, end: int | None = None) -> Iterator[StoredRecord]:
        """Decode every record from ``start`` (a record boundary) up to ``end``."""
        for entry in self.walk(self.min_offset if start is None else start, end):
            if isinstance(entry, Corruption):
                raise CorruptRecordError(entry.reason, offset=entry.offset)
            yield decode_record(entry.segment.buffer, entry.offset - entry.segment.start_offset,
                                verified=True)

    def walk(self, start: int, end: int | None = None) -> Iterator[ScanEntry | Corruption]:
        """Verify records from ``start``; yield each sound one, then a Corruption if any.

        Stops quietly at the end of written data. Used by recovery (which
        stops at the first corruption) and by ``inspect --verify``.
        """
        limit = self._write_offset if end is None else end
        require_tail = self.require_crc_tail
        offset = start
        while True:
            mf = self.queue.find(offset)
            if mf is None:
                return
            pos = offset - mf.start_offset
            view = memoryview(mf.buffer)
            seg_limit = mf.limit
            while offset < limit:
                checked = verify_record(view, pos, seg_limit, require_tail)
                if isinstance(checked, str):
                    if checked != "end of written data":
                        yield Corruption(offset, checked, mf.path.name)
                    return
                size, magic, _ = checked
                if magic == BLANK_MAGIC:
                    break
                yield ScanEntry(offset, size, mf)
                pos += size
                offset += size
            else:
                return
            offset = mf.end_offset

    def walk_trusted(self, start: int, end: int) -> Iterator[ScanEntry]:
        """Step through records already verified by :meth:`recover`, by size alone."""
        offset = start
        while offset < end:
            mf = self.queue.find(offset)
            if mf is None:
                return
            buf = mf.buffer
            pos = offset - mf.start_offset
            seg_end = min(mf.limit, end - mf.start_offset)
            while pos < seg_end:
                total, magic = _BLANK.unpack_from(buf, pos)
                if magic == BLANK_MAGIC or total == 0:
                    break
                yield ScanEntry(mf.start_offset + pos, total, mf)
                pos += total
            offset = mf.end_offset

    # -- recovery --------------------------------------------------------------

    def recover(self, hint: int, visit: Callable[[ScanEntry], None] | None = None,
                visit_from: int = 0) -> tuple[int, Corruption | None]:
        """Walk from the start of the segment holding ``hint`` and truncate at the end.

        ``hint`` is the checkpointed offset: everything before its segment is
        trusted, everything after is checked. Returns the new write offset and
        the first corruption met, if any. Segment write positions are restored.
        ``visit`` is called with every sound record at or after ``visit_from``,
        so that re-dispatching rides on this one read of the log.
        """
        files = self.queue.files
        if not files:
            self._write_offset = self._flushed_offset = self.min_offset
            return self._write_offset, None
        holder = self.queue.find(hint) or (files[0] if hint < files[0].start_offset else files[-1])
        end = holder.start_offset
        corruption: Corruption | None = None
        for entry in self.walk(end, end=1 << 62):
            if isinstance(entry, Corruption):
                corruption = entry
                break
            end = entry.offset + entry.size
            if visit is not None and entry.offset >= visit_from:
                visit(entry)
        self._truncate(end)
        return end, corruption

    def _truncate(self, end: int) -> None:
        if self.queue.files and end == self.queue.files[0].start_offset:
            # Keep the first segment (emptied) so the log keeps its base offset.
            first = self.queue.files[0]
            self.queue.truncate_from(end + 1)
            first.zero_from(0)
        else:
            self.queue.truncate_from(end)
        for mf in self.queue.files:
            mf.wrote_position = min(mf.file_size, max(0, end - mf.start_offset))
            mf.flushed_position = mf.wrote_position
        self._write_offset = end
        self._flushed_offset = end

    def delete_segment(self) -> MappedFile | None:
        """Delete the oldest segment unless it is the active one."""
        if len(self.queue.files) <= 1:
            return None
        return self.queue.delete_first()

    def close(self) -> None:
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.destroy()
        self.queue.close()
