"""MessageStore: the CommitLog, its consume queues and key index, as one unit.

Appends are serialised by one lock. Under it the store assigns the queue
offset, writes the record to the log and dispatches it to its consume queue
and the key index, so a record is readable through every path as soon as
``put`` returns. Everything that may fail for lack of disk space (a new
segment, queue file or index file) is allocated *before* the record is
written, so a full disk leaves the store exactly as it was.

Opening a store recovers it (see :meth:`MessageStore._recover`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from broker_lite.errors import (
    BrokerError,
    InvalidMessageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
    StoreClosedError,
)
from broker_lite.storage.batch_append import BatchAppender, Checked
from broker_lite.storage.checkpoint import AbortMarker, Checkpoint, CheckpointFile
from broker_lite.storage.commitlog import CommitLog
from broker_lite.storage.config import StoreConfig
from broker_lite.storage.consume_queue import ConsumeQueue, QueueUnit
from broker_lite.storage.flush import FlushService
from broker_lite.storage.key_index import KeyIndex, index_keys
from broker_lite.storage.layout import check_layout, read_layout
from broker_lite.storage.private import private_dir
from broker_lite.storage.properties import (
    CRC32_PROPERTY,
    MAX_PROPERTIES_BYTES,
    TAGS,
    encode_properties,
)
from broker_lite.storage.record import (
    CRC_TAIL_SIZE,
    QUEUED_TX_TYPES,
    StoredRecord,
    SysFlag,
    pack_host,
    tag_hash,
)
from broker_lite.storage.record_encoder import encode_record_into, record_size
from broker_lite.storage.recovery import RecoveryReport, Redispatcher
from broker_lite.storage.store_types import (
    MessageToStore,
    PutResult,
    RetentionReport,
    validate_topic,
)

__all__ = [
    "MessageStore",
    "MessageToStore",
    "PutResult",
    "RecoveryReport",
    "RetentionReport",
    "read_layout",
    "validate_topic",
]

log = logging.getLogger("broker_lite.storage")

# plain ints for the append path (an IntEnum member lookup costs more than the test)
_TX_MASK = int(SysFlag.TX_MASK)
_QUEUED_TX = frozenset(int(t) for t in QUEUED_TX_TYPES)
_BORN_V6 = int(SysFlag.BORNHOST_V6)
_STORE_V6 = int(SysFlag.STOREHOST_V6)

class MessageStore:
    """A broker's whole on-disk state below the broker core."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        root = Path(config.data_dir)
        private_dir(root)
        self._root = root
        check_layout(root, config)
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._closed = False
        self._store_host = pack_host(*_split_host(config.store_host))
        self._store_host_bits = _STORE_V6 if len(self._store_host) == 20 else 0
        self._crc_tail = config.append_prop_crc
        self._max_body = config.max_message_size
        #: the most encoded properties may take (less the __CRC32# tail and its separator)
        self._max_props = MAX_PROPERTIES_BYTES - (CRC_TAIL_SIZE + 1 if self._crc_tail else 0)
        #: a record's size without its born host, body, topic and properties (record_size)
        self._size_base = record_size(0, 0, 0, sysflag=self._store_host_bits,
                                      crc_tail=self._crc_tail) - 8 - 1
        self._log = CommitLog(root / "commitlog", config.segment_size,
                              require_crc_tail=config.append_prop_crc)
        self._queue_dir = root / "consumequeue"
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._topic_bytes: dict[str, bytes] = {}
        self._index = KeyIndex(root / "index", config.index_slots, config.index_entries)
        self._abort = AbortMarker(root / "abort")
        self._checkpoints = CheckpointFile(root / "checkpoint")
        self._batch = BatchAppender(self._log, self._index, self._queues,
                                    store_host=self._store_host, crc_tail=self._crc_tail)
        self.recovery = self._recover()
        self._abort.create()
        self._flusher = FlushService(
            mode=config.flush,
            flush=self._log.flush,
            checkpoint=self._checkpoint,
            interval=config.flush_interval,
            checkpoint_interval=config.checkpoint_interval,
            after_flush=self._log.prepare_next,
        )
        self._flusher.start(self._log.max_offset)

    # -- recovery ------------------------------------------------------------

    def _recover(self) -> RecoveryReport:
        """Bring the log, queues and index back to one consistent state, in one read.

        1. Load every consume queue; drop key index files never flushed (their
           records are re-indexed in step 2).
        2. Validate the log from the segment holding the checkpoint (CRC and
           length of every record) and truncate at the first bad record. On
           the way, re-dispatch records after the checkpoint that their queue
           or the key index lack (with no checkpoint: every record).
        3. Drop queue units pointing past the new end of the log.

        A queue can only hold a record if it holds every earlier one of its
        queue, so "its queue offset is below the queue's end" means "already
        there", even while units a truncation will drop are still present.
        """
        started = time.perf_counter()
        crashed = self._abort.found()
        checkpoint = self._checkpoints.last
        hint = checkpoint.dispatched_offset if checkpoint else self._log.min_offset
        self._load_queues()
        dropped = self._index.drop_unflushed()
        if dropped:
            log.info("%d key index file(s) never flushed before the crash: rebuilt", dropped)
        dispatcher = Redispatcher(self._queues, self._queue, self._index)
        log_end, corruption = self._log.recover(
            hint, dispatcher.visit, hint if checkpoint else self._log.min_offset)
        if corruption is not None:
            log.warning("commit log truncated at %d: %s (segment %s)", corruption.offset,
                        corruption.reason, corruption.segment)
        for cq in self._queues.values():
            cq.truncate_dirty(log_end)
            cq.delete_below(self._log.min_offset)
        return RecoveryReport(crashed, checkpoint, log_end, corruption, dispatcher.count,
                              time.perf_counter() - started)

    def _load_queues(self) -> None:
        if not self._queue_dir.exists():
            return
        for topic_dir in sorted(self._queue_dir.iterdir()):
            for queue_dir in sorted(topic_dir.iterdir()):
                if not queue_dir.name.isdigit():
                    continue
                self._queues[(topic_dir.name, int(queue_dir.name))] = ConsumeQueue(
                    queue_dir, topic_dir.name, int(queue_dir.name),
                    self.config.units_per_queue_file)

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self._queue_dir / topic / str(queue_id), topic, queue_id,
                              self.config.units_per_queue_file)
            self._queues[key] = cq
        return cq

    # -- writing -------------------------------------------------------------

    def put_nowait(self, msg: MessageToStore) -> PutResult:
        """Append a record; return once it is in the page cache.

        In ``sync`` mode the caller then waits with :meth:`wait_flushed` or
        :meth:`when_flushed` before acknowledging it.
        """
        checked = self._check(msg)
        with self._lock:
            if self._closed:
                raise StoreClosedError("the message store is closed")
            return self._append(msg, checked, int(time.time() * 1000))

    def put_batch_nowait(self, msgs: Sequence[MessageToStore]) -> list[PutResult | BrokerError]:
        """Append records in order, each stored or refused on its own; return once they
        are in the page cache.

        One outcome per message, in order: its :class:`PutResult`, or the error
        that refused it (a refusal does not stop the others, and leaves the
        store as it was, as :meth:`put_nowait` does). The lock is taken and the
        clock read once for the whole batch; each record is written exactly as
        :meth:`put_nowait` would write it. In ``sync`` mode the caller waits for
        the highest end offset, one wait for the batch.
        """
        checked: list[Checked | BrokerError] = []
        total = 0  # bytes of the records checked
        check = self._check
        for msg in msgs:
            try:
                found = check(msg)
            except BrokerError as exc:
                checked.append(exc)
                continue
            checked.append(found)
            total += found[2]
        results: list[PutResult | BrokerError] = []
        with self._lock:
            if self._closed:
                raise StoreClosedError("the message store is closed")
            now = int(time.time() * 1000)
            if not self._batch.append(msgs, checked, total, now, results):
                append = self._append
                for msg, item in zip(msgs, checked, strict=True):
                    if isinstance(item, BrokerError):
                        results.append(item)
                        continue
                    try:
                        results.append(append(msg, item, now))
                    except BrokerError as exc:
                        results.append(exc)
        return results

    def _check(self, msg: MessageToStore) -> Checked:
        """Validate ``msg`` and encode what does not depend on where it goes (no lock)."""
        topic = msg.topic
        topic_b = self._topic_bytes.get(topic)
        if topic_b is None:
            topic_b = validate_topic(topic)
            self._topic_bytes[topic] = topic_b
        body_len = len(msg.body)
        if body_len > self._max_body:
            raise MessageTooLargeError(size=body_len, limit=self._max_body, topic=topic)
        if not 0 <= msg.queue_id < 65536:
            raise InvalidMessageError(f"{msg.queue_id} is not in [0, 65535]", field="queue_id")
        props = msg.properties
        if CRC32_PROPERTY in props:  # RocketMQ drops a stale one before appending its own
            props = {k: v for k, v in props.items() if k != CRC32_PROPERTY}
        props_b = encode_properties(props)
        if len(props_b) > self._max_props:
            raise InvalidMessageError(
                f"{len(props_b)} bytes encoded, over the limit of "
                f"{MAX_PROPERTIES_BYTES - CRC_TAIL_SIZE - 1} (the __CRC32# tail takes "
                f"{CRC_TAIL_SIZE})", field="properties")
        topic_len = len(topic_b)
        # record_size, inlined (a call per record): the fixed part, the hosts, the pieces
        size = (self._size_base + (20 if len(msg.born_host) == 20 else 8) + body_len
                + (1 if topic_len <= 127 else 2) + topic_len + len(props_b))
        return (topic_b, props_b, size, (msg.sysflag & _TX_MASK) in _QUEUED_TX,
                index_keys(props), tag_hash(props.get(TAGS)))

    def _append(self, msg: MessageToStore, checked: Checked, now: int) -> PutResult:
        """Write one checked record, its queue unit and index entries; under ``_lock``.

        Everything that may need disk space is allocated before a byte is written.
        """
        topic_b, props_b, size, dispatch, keys, tag = checked
        cq = None
        queue_offset = 0
        if dispatch:
            cq = self._queues.get((msg.topic, msg.queue_id))
            if cq is None:
                cq = self._queue(msg.topic, msg.queue_id)
            queue_offset = cq.max_offset
        commit_log = self._log
        offset, buf, pos = commit_log.reserve_at(size)
        unit_file = cq.prepare(queue_offset) if cq is not None else None
        if keys:
            self._index.prepare(len(keys), offset)
        now = msg.store_timestamp or now
        encode_record_into(
            buf, pos, size, topic_b, msg.body, props_b, msg.queue_id, msg.flag, queue_offset,
            offset, msg.sysflag, msg.born_timestamp or now, msg.born_host, now,
            self._store_host, msg.reconsume_times, msg.prepared_tx_offset, self._crc_tail,
        )
        commit_log.advance(size)
        if cq is not None and unit_file is not None:
            cq.write_unit(unit_file, queue_offset, offset, size, tag)
        if keys:
            self._index.put(keys, offset, now)
        return PutResult(offset, size, queue_offset, now)

    def put(self, msg: MessageToStore, *, timeout: float | None = 10.0) -> PutResult:
        """Append a record and, in ``sync`` mode, wait until it is durable."""
        result = self.put_nowait(msg)
        if self.config.flush == "sync" and not self._flusher.wait(result.end_offset, timeout):
            raise StorageError(f"flush of offset {result.physical_offset} timed out",
                               retriable=True)
        return result

    def wait_flushed(self, end_offset: int, timeout: float | None = None) -> bool:
        return self._flusher.wait(end_offset, timeout)

    def when_flushed(
        self, end_offset: int, callback: Callable[[BaseException | None], None]
    ) -> None:
        """Call ``callback`` (from the flusher thread) once ``end_offset`` is durable."""
        if self.config.flush == "async":
            callback(None)
        else:
            self._flusher.when_flushed(end_offset, callback)

    def request_flush(self, end_offset: int) -> None:
        """Ask the flusher (``sync`` mode) to make ``end_offset`` durable soon."""
        self._flusher.request(end_offset)

    def add_flush_listener(self, listener: Callable[[int, BaseException | None], None]) -> None:
        """``listener(flushed_offset, error)`` after every flush, on the flusher thread."""
        self._flusher.add_listener(listener)

    def flush(self) -> int:
        """Make everything written so far durable now; return the offset."""
        return self._log.flush()
    def _checkpoint(self) -> None:
        """Flush queues and index, then the log, then record how far all three go.

        Runs in the flusher thread, and from ``close`` and retention; one at a time.
        """
        with self._checkpoint_lock:
            with self._lock:
                if self._closed:
                    return
                dispatched = self._log.max_offset
                queues = list(self._queues.values())
            for cq in queues:
                cq.flush()
            self._index.flush()
            flushed = self._log.flush()
            self._checkpoints.write(Checkpoint(
                log_flushed_offset=flushed,
                dispatched_offset=dispatched,
                log_min_offset=self._log.min_offset,
                timestamp_ms=int(time.time() * 1000),
            ))

    # -- reading -------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self._log.min_offset

    @property
    def max_offset(self) -> int:
        return self._log.max_offset

    @property
    def flushed_offset(self) -> int:
        return self._flusher.flushed_offset

    def get(self, offset: int) -> StoredRecord:
        """The record at a physical offset (CRC-checked)."""
        try:
            return self._log.read(offset)
        except ValueError as exc:  # the segment was unmapped by retention meanwhile
            raise OffsetOutOfRangeError(offset=offset, min_offset=self.min_offset,
                                        max_offset=self.max_offset) from exc

    def get_raw(self, offset: int, size: int) -> bytes:
        return self._log.read_raw(offset, size)

    def scan(self, start: int | None = None, end: int | None = None) -> Iterator[StoredRecord]:
        return self._log.scan(start, end)

    def queues(self) -> list[tuple[str, int]]:
        with self._lock:
            return sorted(self._queues)

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """``(min, max)`` queue offsets of a queue; ``(0, 0)`` if it has none."""
        cq = self._queues.get((topic, queue_id))
        return (cq.min_offset, cq.max_offset) if cq else (0, 0)

    def queue_units(self, topic: str, queue_id: int, start: int, limit: int) -> list[QueueUnit]:
        cq = self._queues.get((topic, queue_id))
        return list(cq.range(start, limit)) if cq else []

    def read_queue(
        self, topic: str, queue_id: int, start: int, limit: int,
        tag_hashes: frozenset[int] | None = None,
    ) -> tuple[list[StoredRecord], int]:
        """Up to ``limit`` records from a queue, and the next offset to read.

        With ``tag_hashes``, units whose tag hash is not in the set are skipped
        without reading the log (RocketMQ's consume-queue tag filter).
        """
        records: list[StoredRecord] = []
        next_offset = start
        for unit in self.queue_units(topic, queue_id, start, limit):
            next_offset = unit.queue_offset + 1
            if tag_hashes is not None and unit.tag_hash not in tag_hashes:
                continue
            try:
                records.append(self.get(unit.commitlog_offset))
            except OffsetOutOfRangeError:
                continue  # deleted by retention
        return records, max(next_offset, self.queue_offsets(topic, queue_id)[0])

    def lookup_key(self, key: str, limit: int = 64) -> list[StoredRecord]:
        """Records carrying ``key`` as unique key, transaction id or user key, newest first."""
        found: list[StoredRecord] = []
        for offset in self._index.candidates(key, limit):
            if not self.min_offset <= offset < self.max_offset:
                continue
            try:
                record = self.get(offset)
            except (StorageError, OffsetOutOfRangeError):
                continue
            if key in index_keys(record.properties) and record.physical_offset == offset:
                found.append(record)
        return found[:limit]

    # -- retention -----------------------------------------------------------

    def delete_expired(self, now: float | None = None) -> RetentionReport:
        """Delete segments older than the retention period, then what pointed into them.

        The active segment is never deleted; neither is anything newer than an
        unexpired segment (segments go strictly oldest first).
        """
        now = time.time() if now is None else now
        cutoff = now - self.config.retention_hours * 3600
        segments = queue_files = index_files = 0
        with self._lock:
            files = self._log.queue.files
            while len(files) > 1 and files[0].path.stat().st_mtime < cutoff:
                self._log.delete_segment()
                segments += 1
            if segments:
                min_offset = self._log.min_offset
                for cq in self._queues.values():
                    queue_files += cq.delete_below(min_offset)
                index_files = self._index.delete_below(min_offset)
        if segments:
            self._checkpoint()
        return RetentionReport(segments, queue_files, index_files, self._log.min_offset)

    # -- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Flush, checkpoint and close; the next open is a clean start."""
        if self._closed:
            return
        self._flusher.stop()
        try:
            self._checkpoint()
        except OSError as exc:
            # The abort file stays, so the next open re-validates the tail.
            log.error("final checkpoint failed, next start will run crash recovery: %s", exc)
            self._abort.path.touch()
        with self._lock:
            self._closed = True
            for cq in self._queues.values():
                cq.close()
            self._index.close()
            self._log.close()
        if self._checkpoints.last is not None and self._checkpoints.last.dispatched_offset == (
            self._log.max_offset
        ):
            self._abort.remove()

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _split_host(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port or 0)
