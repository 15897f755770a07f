"""What the transaction service knows of each half, and how it is rebuilt from the log.

One :class:`HalfEntry` per half stored. A half is found by its transaction id
(its ``UNIQ_KEY``); the native door and the gRPC door by default store one half
per transaction id (a second send of the same id returns the first), but
RocketMQ stores every half it is sent, so a client that re-sends a half after a
timeout leaves two halves with one transaction id, each checked back and ended
on its own. The gRPC door's proxy mode does the same (``dedupe=False``): the
second half gets its own entry, keyed ``transaction_id@commit-log offset``, and
an end names its half by commit-log offset. Its renewed copies carry
``TRAN_PREPARED_QUEUE_OFFSET`` (the first copy's half-queue offset, as
RocketMQ's immunity re-puts do), so a rebuild gives each copy to its half.

:func:`rebuild` reads the half queue, the op queue and
``TRANS_CHECK_MAX_TIME_TOPIC`` back into a :class:`HalfTable` after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker_lite.core.topics import HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from broker_lite.storage import MessageStore, StoredRecord, TxType
from broker_lite.storage.properties import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    TRAN_PREPARED_QUEUE_OFFSET,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TX_STATE,
    UNIQ_KEY,
)

__all__ = [
    "COMMITTED",
    "DISCARDED",
    "OP_NAMES",
    "PENDING",
    "REMOVE_TAG",
    "ROLLED_BACK",
    "HalfEntry",
    "HalfTable",
    "find_commit",
    "op_offsets",
    "rebuild",
]

log = logging.getLogger("broker_lite.core.transactions")

#: the op record's tag (``TransactionalMessageUtil.REMOVE_TAG``)
REMOVE_TAG = "d"
PENDING, COMMITTED, ROLLED_BACK, DISCARDED = "pending", "committed", "rolled_back", "discarded"
OP_NAMES = {COMMITTED: "COMMIT", ROLLED_BACK: "ROLLBACK", DISCARDED: "DISCARD"}
_STATE_OF_OP = {v: k for k, v in OP_NAMES.items()}


def op_offsets(body: bytes) -> list[int]:
    """The half-queue offsets an op record's body lists (``"12,13,"``); junk is skipped."""
    return [int(part) for part in body.decode("ascii", "replace").split(",")
            if part.strip().isdigit()]


@dataclass(slots=True)
class HalfEntry:
    """What the broker knows about one half (one transaction, unless re-sent)."""

    transaction_id: str
    producer_group: str
    real_topic: str
    real_queue_id: int
    half_offset: int
    queue_offset: int
    store_ts: int
    immunity_ms: int
    state: str = PENDING
    check_times: int = 0
    last_check_ms: int = 0
    commit_offset: int = -1
    commit_queue_offset: int = -1
    #: every stored copy of the half (the first, then one per check): offset -> queue offset
    copies: dict[int, int] = field(default_factory=dict)
    #: the table's key: the transaction id, or ``id@offset`` for a re-sent half
    key: str = ""

    def __post_init__(self) -> None:
        self.copies.setdefault(self.half_offset, self.queue_offset)
        self.key = self.key or self.transaction_id

    @property
    def latest_offset(self) -> int:
        return max(self.copies)

    @property
    def resent(self) -> bool:
        """A second (or later) half stored under a transaction id already stored."""
        return self.key != self.transaction_id


class HalfTable:
    """Every half by key, the unresolved ones, and the halves of each transaction id."""

    def __init__(self) -> None:
        self.entries: dict[str, HalfEntry] = {}
        self.pending: dict[str, HalfEntry] = {}
        self._resent: dict[str, list[HalfEntry]] = {}

    def add(self, entry: HalfEntry) -> HalfEntry:
        if entry.transaction_id in self.entries:
            entry.key = f"{entry.transaction_id}@{entry.half_offset}"
            self._resent.setdefault(entry.transaction_id, []).append(entry)
        self.entries[entry.key] = entry
        if entry.state == PENDING:
            self.pending[entry.key] = entry
        return entry

    def first(self, transaction_id: str) -> HalfEntry | None:
        return self.entries.get(transaction_id)

    def halves(self, transaction_id: str) -> list[HalfEntry]:
        """Every half stored under ``transaction_id``, first first."""
        first = self.entries.get(transaction_id)
        if first is None:
            return []
        return [first, *self._resent.get(transaction_id, ())]

    def find(self, transaction_id: str, commit_log_offset: int) -> HalfEntry | None:
        """The half a request names: by a copy's commit-log offset when given, else the first."""
        if transaction_id not in self._resent:  # one half under this id (the common case)
            return self.entries.get(transaction_id)
        halves = self.halves(transaction_id)
        if commit_log_offset >= 0:
            for entry in halves:
                if commit_log_offset in entry.copies:
                    return entry
        return halves[0] if halves else None

    def settle(self, entry: HalfEntry, state: str) -> None:
        entry.state = state
        self.pending.pop(entry.key, None)


def find_commit(store: MessageStore, entry: HalfEntry) -> StoredRecord | None:
    """The commit record written for ``entry``'s half, if any."""
    for record in store.lookup_key(entry.transaction_id):
        if record.tx_type == TxType.COMMIT and record.prepared_tx_offset in entry.copies:
            return record
    return None


def _records(store: MessageStore, topic: str) -> Iterator[StoredRecord]:
    low, high = store.queue_offsets(topic, 0)
    offset = low
    while offset < high:
        records, offset = store.read_queue(topic, 0, offset, 256)
        yield from records


def _entry_from_half(record: StoredRecord) -> HalfEntry:
    props = record.properties
    immunity = props.get(CHECK_IMMUNITY_TIME_IN_SECONDS)
    return HalfEntry(
        transaction_id=props.get(TRANSACTION_ID) or props.get(UNIQ_KEY, ""),
        producer_group=props.get(PGROUP, ""),
        real_topic=props.get(REAL_TOPIC, ""),
        real_queue_id=int(props.get(REAL_QID, "0")),
        half_offset=record.physical_offset,
        queue_offset=record.queue_offset,
        store_ts=record.store_timestamp,
        immunity_ms=int(float(immunity) * 1000) if immunity else 0,
    )


def _owner(table: HalfTable, by_queue_offset: dict[int, HalfEntry],
           record: StoredRecord) -> HalfEntry | None:
    """The half a stored copy belongs to: by the first copy's queue offset, else its id."""
    props = record.properties
    first = props.get(TRAN_PREPARED_QUEUE_OFFSET, "")
    if first.isdigit() and int(first) in by_queue_offset:
        return by_queue_offset[int(first)]
    return table.first(props.get(TRANSACTION_ID) or props.get(UNIQ_KEY, ""))


def rebuild(store: MessageStore) -> HalfTable:
    """The halves in the log and what became of each (commits found are left to the caller)."""
    table = HalfTable()
    by_queue_offset: dict[int, HalfEntry] = {}
    for record in _records(store, HALF_TOPIC):
        props = record.properties
        entry = _owner(table, by_queue_offset, record)
        times = props.get(TRANSACTION_CHECK_TIMES, "")
        if entry is None or not (times or TRAN_PREPARED_QUEUE_OFFSET in props):
            entry = table.add(_entry_from_half(record))  # a half, maybe re-sent
        else:  # a renewed copy: one more check
            entry.copies[record.physical_offset] = record.queue_offset
            if times.isdigit() and int(times) >= entry.check_times:
                entry.check_times = int(times)
                entry.last_check_ms = record.store_timestamp
        by_queue_offset[record.queue_offset] = entry
    for op in _records(store, OP_TOPIC):
        if op.tags != REMOVE_TAG:
            continue  # RocketMQ logs such an op as illegal and skips it
        kind = op.properties.get(TX_STATE, "")
        for offset in op_offsets(op.body):
            entry = by_queue_offset.get(offset)
            if entry is None or entry.state != PENDING:
                continue
            if kind in _STATE_OF_OP:
                table.settle(entry, _STATE_OF_OP[kind])
            else:  # RocketMQ's own op record says "removed", not how
                table.settle(entry, COMMITTED if find_commit(store, entry) else ROLLED_BACK)
    for record in _records(store, TRANS_CHECK_MAX_TIME_TOPIC):
        gone = _owner(table, by_queue_offset, record)
        if gone is not None and gone.state == PENDING:
            table.settle(gone, DISCARDED)
    return table
