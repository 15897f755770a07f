"""``broker-lite migrate-store``: rewrite a format-1 data directory in format 2.

Format 1 (broker_lite before RocketMQ 5's byte layout) wrote every record with
the V2 magic, an unmasked body CRC and an 18-byte ``__CRC32#`` property of 8
hex digits covering the record without its body; its transactions kept
PREPARED halves, one op record per resolution with ``TX_STATE`` and the half's
queue offset as the body, and ``CHECK`` op records (tag ``c``) for checks.

Migration reads the old log (checking both old CRCs; it stops at the first
unsound record, as recovery would), and re-puts every record into a new
directory in order, keeping store timestamps, and translating the
transaction records into RocketMQ's model: halves with the transaction bits
cleared, a renewed half copy per ``CHECK``, op bodies ``"N,"`` naming the new
half-queue offsets, commit records naming the new half offset, and no op for
a discard. Queue offsets of user topics come out the same, so consumer
offsets stay valid. The old directory is never changed.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_lite.errors import StorageError
from broker_lite.storage.config import StoreConfig
from broker_lite.storage.layout import read_layout
from broker_lite.storage.properties import TRANSACTION_CHECK_TIMES
from broker_lite.storage.record import (
    BLANK_MAGIC,
    MAGIC_V2,
    StoredRecord,
    SysFlag,
    TxType,
    decode_record,
)
from broker_lite.storage.store import MessageStore, MessageToStore
from broker_lite.values.names import HALF_TOPIC, OP_TOPIC
from broker_lite.values.names import TRANS_CHECK_MAX_TIME_TOPIC as MAX_TIME_TOPIC

__all__ = ["MigrationReport", "legacy_records", "migrate_store"]

_OLD_TAIL = 18  # "__CRC32#" \x01 8 hex digits \x02
_TOTAL_MAGIC = struct.Struct(">II")
_SKIP = frozenset({"commitlog", "consumequeue", "index", "checkpoint", "abort", "meta.json"})


@dataclass(frozen=True, slots=True)
class MigrationReport:
    records: int
    bytes_read: int
    stopped_at: str  # "" when the whole old log was sound


def _legacy_problem(data: memoryview, pos: int, total: int) -> str:
    end = pos + total
    if total < 88 + 4 + _OLD_TAIL or end > len(data):
        return f"bad total size {total}"
    body_len = struct.unpack_from(">I", data, pos + 84)[0]
    body_end = pos + 88 + body_len
    if body_end + 4 + _OLD_TAIL > end:
        return f"bad body length {body_len}"
    if zlib.crc32(data[pos + 88 : body_end]) != struct.unpack_from(">I", data, pos + 8)[0]:
        return "body CRC mismatch"
    crc = zlib.crc32(data[body_end : end - 9], zlib.crc32(data[pos : pos + 88]))
    if bytes(data[end - 9 : end - 1]) != b"%08X" % crc:
        return "record CRC mismatch"
    return ""


def legacy_records(log_dir: Path, segment_size: int) -> Iterator[StoredRecord | str]:
    """Every sound format-1 record in order; a reason string where the log stops."""
    for path in sorted(log_dir.glob("[0-9]" * 20)):
        start = int(path.name)
        data = memoryview(path.read_bytes())
        pos = 0
        while pos + 8 <= len(data):
            total, magic = _TOTAL_MAGIC.unpack_from(data, pos)
            if magic == BLANK_MAGIC or (total == 0 and magic == 0):
                break
            if magic != MAGIC_V2:
                yield f"offset {start + pos}: bad magic code 0x{magic:08X}"
                return
            problem = _legacy_problem(data, pos, total)
            if problem:
                yield f"offset {start + pos}: {problem}"
                return
            record = decode_record(data, pos, verified=True)
            record.properties.pop("__CRC32#", None)
            yield record
            pos += total
        if len(data) != segment_size:
            return  # a short last file: nothing can follow it


class _Translator:
    """Re-puts old records into the new store, in RocketMQ's transaction model."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.offsets: dict[int, int] = {}  # old physical offset -> new
        self.halves: dict[int, StoredRecord] = {}  # old half-queue offset -> old half
        self.half_queue: dict[int, int] = {}  # old half-queue offset -> new half-queue offset

    def put(self, rec: StoredRecord) -> None:
        props = dict(rec.properties)
        sysflag, prepared = rec.sysflag, rec.prepared_tx_offset
        topic, body = rec.topic, rec.body
        if topic == HALF_TOPIC:
            sysflag &= ~SysFlag.TX_MASK
        elif topic == OP_TOPIC:
            old = int(body.decode() or "-1")
            if props.get("TX_STATE") == "CHECK":
                half = self.halves.get(old)
                if half is None:
                    return
                topic, body, sysflag = HALF_TOPIC, half.body, half.sysflag & ~SysFlag.TX_MASK
                props = {**half.properties, TRANSACTION_CHECK_TIMES:
                         props.get(TRANSACTION_CHECK_TIMES, "1"), "TX_STATE": "CHECK"}
            elif props.get("TX_STATE") == "DISCARD" or old not in self.half_queue:
                return
            else:
                body = b"%d," % self.half_queue[old]
        elif topic == MAX_TIME_TOPIC:
            prepared = 0
        if sysflag & SysFlag.TX_MASK == TxType.COMMIT:
            prepared = self.offsets.get(prepared, prepared)
        put = self.store.put_nowait(MessageToStore(
            topic=topic, body=body, queue_id=rec.queue_id, flag=rec.flag, sysflag=sysflag,
            properties=props, born_timestamp=rec.born_timestamp, born_host=rec.born_host,
            reconsume_times=rec.reconsume_times, prepared_tx_offset=prepared,
            store_timestamp=rec.store_timestamp))
        self.offsets[rec.physical_offset] = put.physical_offset
        if rec.topic == HALF_TOPIC:
            self.halves[rec.queue_offset] = rec
            self.half_queue[rec.queue_offset] = put.queue_offset


def migrate_store(old_dir: Path, new_dir: Path) -> MigrationReport:
    """Write ``old_dir`` (format 1) into the new, empty ``new_dir`` (format 2)."""
    layout = read_layout(old_dir) or {}
    if layout.get("format", 1) != 1:
        raise StorageError(f"{old_dir} is format {layout.get('format')}, nothing to migrate")
    if new_dir.exists() and any(new_dir.iterdir()):
        raise StorageError(f"{new_dir} is not empty; migrate into a new directory")
    log_dir = old_dir / "commitlog"
    segments = sorted(log_dir.glob("[0-9]" * 20))
    if not segments:
        raise StorageError(f"{old_dir} has no commit-log segment to migrate")
    size = layout.get("segment_size") or (
        int(segments[1].name) - int(segments[0].name) if len(segments) > 1
        else segments[0].stat().st_size)
    defaults = StoreConfig(data_dir=new_dir)
    config = StoreConfig(
        data_dir=new_dir, segment_size=size,
        units_per_queue_file=layout.get("units_per_queue_file", defaults.units_per_queue_file),
        index_slots=layout.get("index_slots", defaults.index_slots),
        index_entries=layout.get("index_entries", defaults.index_entries))
    count = read = 0
    stopped = ""
    with MessageStore(config) as store:
        translator = _Translator(store)
        for item in legacy_records(log_dir, size):
            if isinstance(item, str):
                stopped = item
                break
            translator.put(item)
            count += 1
            read += item.total_size
        store.flush()
    for entry in old_dir.iterdir():  # broker state: topics, consumer offsets, ACLs...
        if entry.name in _SKIP:
            continue
        target = new_dir / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target)
        else:
            shutil.copy2(entry, target)
    return MigrationReport(count, read, stopped)
