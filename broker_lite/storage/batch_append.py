"""The one-pass batch write: a batch of checked records into the current segment.

:meth:`MessageStore.put_batch_nowait` hands a batch here first. When the whole
batch fits in what is left of the current commit-log segment, key index file
and its queues' current files (the common case), :class:`BatchAppender`
writes it in one pass: the records are encoded one after another into a
staging buffer and copied into the segment with one ``pwrite`` at the write
position (no page of the segment's mapping is touched, so no page fault);
then the log's write position moves past them, then each queue gets its units
in one go and the index the batch's entries. Otherwise it writes nothing and
the store appends record by record (a roll-over inside, or a new queue).

The caller holds the store's append lock for the whole call.
"""

from __future__ import annotations

from collections.abc import Sequence

from zlib_ng.zlib_ng import crc32

from broker_lite.errors import BrokerError
from broker_lite.storage.commitlog import CommitLog
from broker_lite.storage.consume_queue import ConsumeQueue
from broker_lite.storage.key_index import KeyIndex
from broker_lite.storage.record import (
    CRC_TAIL_SIZE,
    MAGIC_V1,
    HostAddress,
    SysFlag,
    head_struct,
)
from broker_lite.storage.record_encoder import encode_record_into
from broker_lite.storage.store_types import MessageToStore, PutResult

__all__ = ["BatchAppender", "Checked"]

#: what :meth:`MessageStore._check` found: topic and properties encoded, the record's size,
#: whether it enters a consume queue, its index keys and its tag hash
Checked = tuple[bytes, bytes, int, bool, list[str], int]
#: a consume-queue unit to write: commit-log offset, size, tag hash
Unit = tuple[int, int, int]

#: the staging buffer is kept between batches up to this size (a batch of 64 1-KiB
#: records takes 76 KiB)
_STAGE_KEPT = 1 << 20
_IPV4 = 8
_HEAD4 = head_struct(_IPV4, _IPV4)
_HEAD_SIZE = _HEAD4.size
_MASK31 = 0x7FFFFFFF
_NOT_HOST_BITS = ~(int(SysFlag.BORNHOST_V6) | int(SysFlag.STOREHOST_V6))
#: MessageConst.PROPERTY_CRC32, NAME_VALUE_SEPARATOR, the digits, PROPERTY_SEPARATOR
_CRC_TAIL = b"__CRC32#\x01%s\x02"


class _Run:
    """A queue's part of a batch: the queue, its next queue offset, its units."""

    __slots__ = ("next", "queue", "units")

    def __init__(self, queue: ConsumeQueue) -> None:
        self.queue = queue
        self.next = queue.max_offset
        self.units: list[Unit] = []


class BatchAppender:
    """Writes batches that fit into the store's commit log, queues and index; no lock."""

    __slots__ = ("_crc_tail", "_index", "_log", "_queues", "_stage", "_store_host")

    def __init__(self, commit_log: CommitLog, index: KeyIndex,
                 queues: dict[tuple[str, int], ConsumeQueue], *,
                 store_host: HostAddress, crc_tail: bool) -> None:
        self._log = commit_log
        self._index = index
        #: the store's own dict (shared, not copied)
        self._queues = queues
        self._store_host = store_host
        self._crc_tail = crc_tail
        #: where a batch is encoded before its one ``pwrite`` (grown to the largest batch)
        self._stage = bytearray()

    def append(self, msgs: Sequence[MessageToStore], checked: Sequence[Checked | BrokerError],
               total: int, now: int, results: list[PutResult | BrokerError]) -> bool:
        """Append every checked record of ``msgs`` (``total`` bytes), its outcome into
        ``results``; ``False``, with nothing written, when the batch does not fit in the
        current segment, key index file or consume-queue files, or opens a new queue.

        The same records, units and index entries, in the same order, as one put
        per record. The records are encoded one after another into a staging
        buffer (which is not the store: a batch found not to fit leaves nothing)
        and copied into the segment with one ``pwrite`` (no page fault on the
        mapping); then the log's write position moves past all of them, and then
        each queue gets its units and the index its entries (under the same lock
        hold: a checkpoint, which reads the dispatched offset under the lock,
        never falls inside the batch, and a record is readable before its unit).
        """
        mf = self._log.current_segment(total)
        if mf is None:
            return False
        stage = self._stage
        if total > _STAGE_KEPT:  # a batch of large bodies: its own buffer, dropped after
            stage = bytearray(total)
        elif len(stage) < total:
            stage.extend(bytes(total - len(stage)))
        pos = mf.wrote_position
        indexed: list[tuple[str, int, int]] = []
        outcomes: list[PutResult | BrokerError] = []
        runs: dict[tuple[str, int], _Run] = {}
        q = self._encode(msgs, checked, now, stage, mf.start_offset + pos, runs, indexed,
                         outcomes)
        if q < 0:
            return False
        # every queue's units go to its current file, the keys to the current index file,
        # or the batch goes record by record
        index_file = self._index.current_file(len(indexed)) if indexed else None
        if indexed and index_file is None:
            return False
        unit_files = [run.queue.room_for(len(run.units)) for run in runs.values()]
        if None in unit_files:
            return False
        try:
            mf.write_at(memoryview(stage)[:q], pos)
        except BrokerError as exc:  # nothing is published: every record is refused
            # and what a part-way write left past the write position goes, so that no
            # refused record could be found by recovery after a crash
            mf.zero_from(pos, pos + q)
            results.extend(o if isinstance(o, BrokerError) else exc for o in outcomes)
            return True
        self._log.advance(q)
        for run, unit_file in zip(runs.values(), unit_files, strict=True):
            run.queue.write_units(unit_file, run.units)  # type: ignore[arg-type]
        if index_file is not None:
            index_file.put_many(indexed)
        results.extend(outcomes)
        return True

    def _encode(self, msgs: Sequence[MessageToStore],
                checked: Sequence[Checked | BrokerError], now: int, stage: bytearray,
                base: int, runs: dict[tuple[str, int], _Run],
                indexed: list[tuple[str, int, int]],
                outcomes: list[PutResult | BrokerError]) -> int:
        """Encode the batch's records into ``stage`` from 0; return where they end, or
        -1 if one goes to a queue that does not exist yet (a new queue's first unit
        goes through :meth:`ConsumeQueue.prepare`, record by record).

        An IPv4 record (the common case) is encoded here, with what does not
        change from record to record looked up once; any other goes through
        :func:`encode_record_into`. The bytes are the same either way
        (``tests/broker_lite/storage/test_storage_batch.py`` compares them).
        """
        store_host = self._store_host
        crc_tail = self._crc_tail
        fast_hosts = len(store_host) == _IPV4
        pack_head = _HEAD4.pack_into
        view = memoryview(stage)
        tail_extra = CRC_TAIL_SIZE if crc_tail else 0
        queues = self._queues
        run: _Run | None = None
        last_queue: tuple[str, int] | None = None
        add_result = outcomes.append
        add_key = indexed.append
        new_tuple = tuple.__new__  # PutResult(...) runs a Python-level __new__ per record
        last_topic = b""
        topic_head = b""
        q = 0
        for msg, item in zip(msgs, checked, strict=True):
            if item.__class__ is not tuple:
                add_result(item)  # type: ignore[arg-type]
                continue
            topic_b, props_b, size, dispatch, keys, tag = item
            queue_id = msg.queue_id
            queue_offset = 0
            if dispatch:
                key = (msg.topic, queue_id)
                if key != last_queue:  # a batch is mostly one queue: one look-up for a run
                    last_queue = key
                    run = runs.get(key)
                    if run is None:
                        cq = queues.get(key)
                        if cq is None:
                            return -1
                        run = runs[key] = _Run(cq)
                queue_offset = run.next  # type: ignore[union-attr]
                run.next = queue_offset + 1  # type: ignore[union-attr]
            offset = base + q
            stamp = msg.store_timestamp or now
            born_host = msg.born_host
            body = msg.body
            if fast_hosts and len(born_host) == _IPV4 and len(topic_b) <= 127 and (
                    not props_b or props_b[-1] == 2):
                if topic_b is not last_topic:
                    last_topic = topic_b
                    topic_head = bytes((len(topic_b),)) + topic_b
                body_len = len(body)
                body_at = q + _HEAD_SIZE
                body_end = body_at + body_len
                tail = b"".join((topic_head, (len(props_b) + tail_extra).to_bytes(2, "big"),
                                 props_b))
                props_end = body_end + len(tail)
                pack_head(stage, q, size, MAGIC_V1, crc32(body) & _MASK31, queue_id, msg.flag,
                          queue_offset, offset, msg.sysflag & _NOT_HOST_BITS,
                          msg.born_timestamp or stamp, born_host, stamp, store_host,
                          msg.reconsume_times, msg.prepared_tx_offset, body_len)
                stage[body_at:body_end] = body
                stage[body_end:props_end] = tail
                if crc_tail:
                    crc = crc32(view[q:props_end]) & _MASK31
                    # ten digits, least significant first, zero padded on the right
                    stage[props_end:props_end + CRC_TAIL_SIZE] = _CRC_TAIL % (
                        b"%010d" % crc)[::-1]
                    props_end += CRC_TAIL_SIZE
                if props_end - q != size:
                    raise ValueError(f"the record's fields take {props_end - q} bytes, "
                                     f"not the {size} reserved")
            else:
                encode_record_into(
                    stage, q, size, topic_b, body, props_b, queue_id, msg.flag,
                    queue_offset, offset, msg.sysflag, msg.born_timestamp or stamp, born_host,
                    stamp, store_host, msg.reconsume_times, msg.prepared_tx_offset, crc_tail,
                )
            q += size
            if dispatch:
                run.units.append((offset, size, tag))  # type: ignore[union-attr]
            for index_key in keys:
                add_key((index_key, offset, stamp))
            add_result(new_tuple(PutResult, (offset, size, queue_offset, stamp)))
        view.release()
        return q
