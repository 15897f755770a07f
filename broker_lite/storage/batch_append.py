"""The one-pass batch write: a run of checked records into the current segment.

:meth:`MessageStore.put_batch_nowait` hands a batch here first. When the
whole batch fits in what is left of the current commit-log segment and key
index file (the common case), :class:`BatchAppender` writes it in one pass:
the segment and the index file are looked up once, the records are encoded one
after another at the write position (each published before its queue unit is
written, as a single put does), and the batch's index entries go in together
after them. Otherwise it writes nothing and the store appends record by
record (a roll-over inside).

The caller holds the store's append lock for the whole call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker_lite.errors import BrokerError
from broker_lite.storage.commitlog import CommitLog
from broker_lite.storage.consume_queue import ConsumeQueue
from broker_lite.storage.key_index import KeyIndex
from broker_lite.storage.record import HostAddress
from broker_lite.storage.record_encoder import encode_record_into
from broker_lite.storage.store_types import MessageToStore, PutResult

__all__ = ["BatchAppender", "Checked"]

#: what :meth:`MessageStore._check` found: topic and properties encoded, the record's size,
#: whether it enters a consume queue, its index keys and its tag hash
Checked = tuple[bytes, bytes, int, bool, list[str], int]


class BatchAppender:
    """Writes batches that fit into the store's commit log, queues and index; no lock."""

    __slots__ = ("_crc_tail", "_index", "_log", "_queue", "_queues", "_store_host")

    def __init__(self, commit_log: CommitLog, index: KeyIndex,
                 queues: dict[tuple[str, int], ConsumeQueue],
                 queue: Callable[[str, int], ConsumeQueue], *,
                 store_host: HostAddress, crc_tail: bool) -> None:
        self._log = commit_log
        self._index = index
        #: the store's own dict (shared, not copied) and its factory for a new queue
        self._queues = queues
        self._queue = queue
        self._store_host = store_host
        self._crc_tail = crc_tail

    def append(self, msgs: Sequence[MessageToStore], checked: Sequence[Checked | BrokerError],
               now: int, results: list[PutResult | BrokerError]) -> bool:
        """Append every checked record of ``msgs``, its outcome into ``results``; ``False``,
        with nothing written, when the batch does not fit in the current segment or
        key index file.

        The same records, units and index entries, in the same order, as one put
        per record; only the per-record look-ups of the segment and the index
        file are done once, and the index entries are written together after the
        records (under the same lock hold: a checkpoint, which reads the
        dispatched offset under the lock, never falls inside the batch).
        """
        total = keys_total = 0
        for item in checked:
            if not isinstance(item, BrokerError):
                total += item[2]
                keys_total += len(item[4])
        commit_log = self._log
        mf = commit_log.current_segment(total)
        index_file = self._index.current_file(keys_total) if keys_total else None
        if mf is None or (keys_total and index_file is None):
            return False
        buf = mf.writable()
        base = mf.start_offset
        pos = mf.wrote_position
        queues = self._queues
        store_host = self._store_host
        crc_tail = self._crc_tail
        indexed: list[tuple[str, int, int]] = []
        try:
            for msg, item in zip(msgs, checked, strict=True):
                if isinstance(item, BrokerError):
                    results.append(item)
                    continue
                topic_b, props_b, size, dispatch, keys, tag = item
                cq = None
                queue_offset = 0
                unit_file = None
                if dispatch:
                    cq = queues.get((msg.topic, msg.queue_id))
                    if cq is None:
                        cq = self._queue(msg.topic, msg.queue_id)
                    queue_offset = cq.max_offset
                    try:
                        unit_file = cq.prepare(queue_offset)  # may need a new queue file
                    except BrokerError as exc:
                        results.append(exc)
                        continue
                offset = base + pos
                stamp = msg.store_timestamp or now
                encode_record_into(
                    buf, pos, size, topic_b, msg.body, props_b, msg.queue_id, msg.flag,
                    queue_offset, offset, msg.sysflag, msg.born_timestamp or stamp, msg.born_host,
                    stamp, store_host, msg.reconsume_times, msg.prepared_tx_offset, crc_tail,
                )
                pos += size
                commit_log.advance(size)
                if cq is not None and unit_file is not None:
                    cq.write_unit(unit_file, queue_offset, offset, size, tag)
                for key in keys:
                    indexed.append((key, offset, stamp))
                results.append(PutResult(offset, size, queue_offset, stamp))
        finally:  # what was written is indexed, even if a record failed in between
            if index_file is not None:
                index_file.put_many(indexed)
        return True
