"""Re-dispatch during recovery: records the queues or the key index lack.

Recovery validates the log once (:meth:`CommitLog.recover`); on the way each
sound record after the checkpoint is handed to :class:`Redispatcher`, which
puts it into its consume queue and the key index only if they lack it. A
queue holds a record only if it holds every earlier one of its queue, so "its
queue offset is below the queue's end" means "already there".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker_lite.storage.checkpoint import Checkpoint
from broker_lite.storage.commitlog import Corruption, ScanEntry
from broker_lite.storage.consume_queue import ConsumeQueue
from broker_lite.storage.key_index import KeyIndex, index_keys
from broker_lite.storage.record import (
    QUEUED_TX_TYPES,
    SysFlag,
    decode_record,
    peek_route,
    tag_hash,
)

__all__ = ["RecoveryReport", "Redispatcher"]


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the store found and did."""

    crashed: bool
    checkpoint: Checkpoint | None
    log_end: int
    corruption: Corruption | None
    redispatched: int
    seconds: float



class Redispatcher:
    """Puts records that recovery meets into the queues and index that lack them."""

    def __init__(self, queues: dict[tuple[str, int], ConsumeQueue],
                 queue_for: Callable[[str, int], ConsumeQueue], index: KeyIndex) -> None:
        self._queues = queues
        self._queue_for = queue_for
        self._index = index
        self._indexed_to = index.indexed_up_to()
        self._topics: dict[bytes, str] = {}
        self.count = 0

    def visit(self, entry: ScanEntry) -> None:
        buf = entry.segment.buffer
        pos = entry.offset - entry.segment.start_offset
        sysflag, queue_id, queue_offset, topic_b = peek_route(buf, pos)
        cq = None
        if sysflag & SysFlag.TX_MASK in QUEUED_TX_TYPES:
            topic = self._topics.get(topic_b)
            if topic is None:
                topic = self._topics[topic_b] = topic_b.decode()
            cq = self._queues.get((topic, queue_id)) or self._queue_for(topic, queue_id)
            if queue_offset < cq.max_offset:
                cq = None  # already there
        if cq is None and entry.offset <= self._indexed_to:
            return
        record = decode_record(buf, pos, verified=True)
        if cq is not None:
            cq.append(queue_offset, entry.offset, entry.size, tag_hash(record.tags))
            self.count += 1
        if entry.offset > self._indexed_to:
            keys = index_keys(record.properties)
            if keys:
                self._index.prepare(len(keys), entry.offset)
                self._index.put(keys, entry.offset, record.store_timestamp)
