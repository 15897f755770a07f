"""The key index: message keys and transaction ids to commit-log offsets.

It follows RocketMQ's IndexFile: a header, a table of hash slots, and entries
chained newest-first through each slot. Files are named by the 20-digit
commit-log offset of the first record they index; a full file is followed by
a new one.

=======  ==================================================================
header   begin timestamp 8, end timestamp 8, begin offset 8, end offset 8,
         slot count 4, entry count 4
slots    ``slot_count`` x 4: 1-based number of the newest entry, 0 = empty
entries  ``max_entries`` x 20: key hash 4, commit-log offset 8,
         seconds since begin timestamp 4, previous entry in the chain 4
=======  ==================================================================

The index holds key *hashes*, so a lookup returns candidate offsets: the store
reads each candidate and keeps those whose record really carries the key. That
also makes entries left by a crash harmless, and the index can always be
rebuilt from the log.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from pathlib import Path
from zlib import crc32

from broker_lite.errors import ConfigurationError
from broker_lite.storage.mapped_file import MappedFile, segment_name
from broker_lite.storage.private import private_dir
from broker_lite.storage.properties import KEYS, TRANSACTION_ID, UNIQ_KEY, split_keys

__all__ = ["IndexFile", "KeyIndex", "index_keys", "key_hash"]

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
_SLOTS_AT = _HEADER.size
_ENTRY_SIZE = _ENTRY.size


def key_hash(key: str) -> int:
    """A stable 31-bit hash of a key (CRC32 of its UTF-8 bytes)."""
    return crc32(key.encode("utf-8")) & 0x7FFFFFFF


class IndexFile:
    """One index file. The store serialises writes."""

    def __init__(self, path: Path, begin_offset: int, slot_count: int, max_entries: int) -> None:
        self.slot_count = slot_count
        self.max_entries = max_entries
        size = _HEADER.size + slot_count * _SLOT.size + (max_entries + 1) * _ENTRY.size
        self.file = MappedFile(path, size, begin_offset)
        buf = self.file.buffer
        (self.begin_ts, self.end_ts, self.begin_offset, self.end_offset, slots,
         self.count) = _HEADER.unpack_from(buf, 0)
        if slots == 0:
            self.begin_offset = begin_offset
            self.begin_ts = 0
            self.end_offset = begin_offset
            self._write_header()
        elif slots != slot_count:
            raise ConfigurationError(f"{path}: built with {slots} slots, configured {slot_count} "
                                     "(index_slots)",
                                     setting="index_slots")
        self._entries_at = _HEADER.size + slot_count * _SLOT.size
        self.dirty = False

    def _write_header(self) -> None:
        _HEADER.pack_into(self.file.buffer, 0, self.begin_ts, self.end_ts, self.begin_offset,
                          self.end_offset, self.slot_count, self.count)

    def is_full(self) -> bool:
        return bool(self.count >= self.max_entries)

    def put(self, key: str, offset: int, store_ts: int) -> None:
        buf = self.file.buffer
        h = crc32(key.encode("utf-8")) & 0x7FFFFFFF  # key_hash, inlined: a put per record
        slot_at = _SLOTS_AT + (h % self.slot_count) * 4
        prev = _SLOT.unpack_from(buf, slot_at)[0]
        count = self.count
        if prev > count:
            prev = self._live(prev)
        if self.begin_ts == 0:
            self.begin_ts = store_ts
        number = count + 1
        diff = max(0, (store_ts - self.begin_ts) // 1000)
        _ENTRY.pack_into(buf, self._entries_at + number * _ENTRY_SIZE, h, offset, diff, prev)
        _SLOT.pack_into(buf, slot_at, number)
        self.count = number
        self.end_ts = store_ts
        self.end_offset = offset
        self.dirty = True

    def put_many(self, entries: list[tuple[str, int, int]]) -> None:
        """:meth:`put` of each ``(key, offset, store_ts)``, in order (a batch's keys):
        the same entries, with the header fields set once."""
        buf = self.file.buffer
        slot_count = self.slot_count
        entries_at = self._entries_at
        unpack_slot, pack_slot, pack_entry = _SLOT.unpack_from, _SLOT.pack_into, _ENTRY.pack_into
        count = self.count
        if entries and self.begin_ts == 0:
            self.begin_ts = entries[0][2]
        begin_ts = self.begin_ts
        last_ts = diff = -1  # a batch's entries share a store time: the diff is worked out once
        for key, offset, store_ts in entries:
            h = crc32(key.encode("utf-8")) & 0x7FFFFFFF
            slot_at = _SLOTS_AT + (h % slot_count) * 4
            prev = unpack_slot(buf, slot_at)[0]
            if prev > count:
                self.count = count
                prev = self._live(prev)
            if store_ts != last_ts:
                last_ts = store_ts
                diff = max(0, (store_ts - begin_ts) // 1000)
            count += 1
            pack_entry(buf, entries_at + count * _ENTRY_SIZE, h, offset, diff, prev)
            pack_slot(buf, slot_at, count)
        if entries:
            self.count = count
            self.end_ts = entries[-1][2]
            self.end_offset = entries[-1][1]
            self.dirty = True

    def _live(self, number: int) -> int:
        """Step over entries past the recorded count.

        ``put`` writes the entry, then the slot, then the header. A crash
        between the last two leaves a slot pointing at an entry the header
        does not count; that entry is complete, and its ``prev`` link is the
        slot's real chain, so follow it.
        """
        guard = 0
        while self.count < number <= self.max_entries and guard < 1024:
            at = self._entries_at + number * _ENTRY.size
            number = _ENTRY.unpack_from(self.file.buffer, at)[3]
            guard += 1
        return number if number <= self.count else 0

    def candidates(self, key: str, limit: int) -> list[int]:
        buf = self.file.buffer
        h = key_hash(key)
        number = self._live(
            _SLOT.unpack_from(buf, _HEADER.size + (h % self.slot_count) * _SLOT.size)[0]
        )
        found: list[int] = []
        seen = 0
        while 0 < number <= self.count and len(found) < limit and seen <= self.count:
            eh, offset, _diff, prev = _ENTRY.unpack_from(
                buf, self._entries_at + number * _ENTRY.size
            )
            if eh == h:
                found.append(offset)
            if prev >= number:
                break  # a chain only points backwards; anything else is damage
            number = prev
            seen += 1
        return found

    def flush(self) -> None:
        """Write the header (entry count and end offset), then sync.

        The header is not rewritten on every put: after a crash, entries past
        the saved count are stepped over and their records re-indexed by
        recovery (whose start, the checkpoint, is written after this flush).
        """
        if self.dirty:
            self.dirty = False
            self._write_header()
            self.file.sync()


class KeyIndex:
    """All index files of a store, newest last."""

    def __init__(self, directory: Path, slot_count: int, max_entries: int) -> None:
        self.directory = directory
        self.slot_count = slot_count
        self.max_entries = max_entries
        private_dir(directory)
        self.files: list[IndexFile] = [
            IndexFile(directory / name, int(name), slot_count, max_entries)
            for name in sorted(os.listdir(directory))
            if len(name) == 20 and name.isdigit()
        ]

    def prepare(self, key_count: int, offset: int) -> None:
        """Open a new file first if ``key_count`` keys would not fit (may raise DiskFullError)."""
        if not self.files or self.files[-1].count + key_count > self.max_entries:
            self.files.append(
                IndexFile(self.directory / segment_name(offset), offset, self.slot_count,
                          self.max_entries)
            )

    def current_file(self, key_count: int) -> IndexFile | None:
        """The file ``key_count`` more entries go to; ``None`` when a new one is needed
        first (:meth:`prepare` makes it)."""
        if self.files and self.files[-1].count + key_count <= self.max_entries:
            return self.files[-1]
        return None

    def put(self, keys: list[str], offset: int, store_ts: int) -> None:
        """Index ``keys`` of the record at ``offset``; call :meth:`prepare` first."""
        current = self.files[-1]
        for key in keys[: self.max_entries]:
            current.put(key, offset, store_ts)

    def candidates(self, key: str, limit: int = 64) -> list[int]:
        """Offsets that may hold ``key``, newest first, without duplicates."""
        result: list[int] = []
        seen: set[int] = set()
        for index_file in reversed(self.files):
            for offset in index_file.candidates(key, limit):
                if offset not in seen:
                    seen.add(offset)
                    result.append(offset)
            if len(result) >= limit:
                break
        return result

    def drop_unflushed(self) -> int:
        """Delete the newest files whose header counts no entry; return how many went.

        A file's header (entry count, end offset) is written only when the index
        is flushed, every file at once. So after a crash, files made since the
        last flush count nothing, and recovery re-indexes their records (those
        after :meth:`indexed_up_to`). Left in place, the re-indexed entries would
        go into the newest of them and, when it filled, into a new file named
        after a record those files hold: two files under one name, and keys
        lost. The files dropped hold no entry a lookup could see.
        """
        dropped = 0
        while self.files and self.files[-1].count == 0:
            self.files.pop().file.destroy()
            dropped += 1
        return dropped

    def indexed_up_to(self) -> int:
        """The commit-log offset of the newest indexed record, or -1."""
        return self.files[-1].end_offset if self.files and self.files[-1].count else -1

    def delete_below(self, min_commitlog_offset: int) -> int:
        """Delete whole files whose every entry points below the log's start."""
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_offset < min_commitlog_offset:
            self.files.pop(0).file.destroy()
            deleted += 1
        return deleted

    def flush(self) -> None:
        for index_file in self.files:
            index_file.flush()

    def close(self) -> None:
        for index_file in self.files:
            index_file.flush()
            index_file.file.close()


def index_keys(props: Mapping[str, str]) -> list[str]:
    """The keys a record is indexed under: unique key, transaction id, user keys."""
    keys: list[str] = []
    uniq = props.get(UNIQ_KEY)
    if uniq:
        keys.append(uniq)
    tx_id = props.get(TRANSACTION_ID)
    if tx_id and tx_id != uniq:
        keys.append(tx_id)
    user = props.get(KEYS)
    if user:
        keys.extend(split_keys(user))
    return keys
