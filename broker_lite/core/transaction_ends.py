"""Ending transactions: what an end writes, in rounds of a batch, and the commit hook.

An ``END_TRANSACTION_BATCH`` (and a single end, a batch of one) is answered in
*rounds*: a round takes the ends up to the first one naming a half the round
already ends, writes the round's commit records in one append
(:meth:`~broker_lite.storage.MessageStore.put_batch_nowait`), then its op
records in another, so each transaction's commit record precedes its op
record; the next round starts after those writes. Each end is answered as
ending the requests one by one would answer it.

:class:`TransactionEnds` holds this path for
:class:`~broker_lite.core.transactions.TransactionService`, which mixes it in,
and its one public hook, :meth:`TransactionEnds.after_commit`: called after
each commit record an end writes, it does nothing in the broker. A subclass
may store more there, which the end's answer then waits for too; the tests
use it to model a broker that writes one commit twice
(``tests/support/double_commit_broker.py``), which the audit must report.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from broker_lite.core.model import EndRequest, EndResult
from broker_lite.core.transaction_recent import RecentHalves
from broker_lite.core.transaction_records import commit_record, op_record
from broker_lite.core.transaction_state import (
    COMMITTED,
    DISCARDED,
    OP_NAMES,
    PENDING,
    ROLLED_BACK,
    HalfEntry,
    HalfTable,
)
from broker_lite.errors import (
    BrokerError,
    TransactionConflictError,
    TransactionMismatchError,
    TransactionNotFoundError,
    UnavailableError,
)
from broker_lite.storage import MessageStore, MessageToStore, StoredRecord
from broker_lite.storage.properties import FROM_CHECK

__all__ = ["EndPlan", "TransactionEnds", "check_end_state"]

log = logging.getLogger("broker_lite.core.transactions")


class EndPlan:
    """One end of a batch round that writes records: what it writes, where its answer goes,
    and the log offset its answer waits for."""

    __slots__ = ("copy", "end", "entry", "extra", "slot", "wanted")

    def __init__(self, entry: HalfEntry, wanted: str, copy: int,
                 extra: dict[str, str] | None) -> None:
        self.entry = entry
        self.wanted = wanted
        self.copy = copy
        self.extra = extra
        self.slot = -1
        self.end = 0


def check_end_state(request: EndRequest) -> None:
    """Refuse an end whose state is none of COMMIT, ROLLBACK and UNKNOWN."""
    if request.state not in (0, 8, 12):
        raise TransactionMismatchError(
            f"end-transaction state {request.state} is not COMMIT (8), ROLLBACK (12) "
            "or UNKNOWN (0)")


class TransactionEnds:
    """The end path of :class:`~broker_lite.core.transactions.TransactionService` (a mixin:
    it works on the service's store, half table and recent halves, under its lock)."""

    _store: MessageStore
    _table: HalfTable
    _recent: RecentHalves

    def after_commit(self, entry: HalfEntry, copy_offset: int) -> int:
        """Called, under the service's lock, once an end wrote the commit record of
        ``entry`` (from its half copy at ``copy_offset``; ``entry.commit_offset`` is
        that record's offset): in a batch round after the round's commit records and
        before its op records. Returns the end offset of anything more it stored,
        which the end's answer then waits for too (0: nothing, as here)."""
        return 0

    def _plan_end(self, request: EndRequest) -> EndPlan | tuple[EndResult, int]:
        """What ending ``request`` takes: records to write, or its answer now; under the
        lock. Raises the error to answer with."""
        check_end_state(request)
        entry = self._table.find(request.transaction_id, request.commit_log_offset)
        if entry is None:
            raise TransactionNotFoundError(request.transaction_id)
        self._validate(entry, request)
        wanted = {8: COMMITTED, 12: ROLLED_BACK}.get(request.state)
        if entry.state == PENDING and entry.commit_offset >= 0:
            # the commit record landed but its op record did not (a full disk): the
            # transaction is committed; never append a second commit for it
            if wanted == ROLLED_BACK:
                raise TransactionConflictError(entry.transaction_id, "committed",
                                               OP_NAMES[wanted].lower())
            wanted = COMMITTED
        if entry.state != PENDING:
            if wanted is None or wanted == entry.state:
                return self._ended(entry, already=True), 0
            log.warning("late %s for transaction %s refused: already %s",
                        OP_NAMES[wanted], entry.transaction_id, entry.state)
            raise TransactionConflictError(entry.transaction_id, entry.state.replace("_", " "),
                                           OP_NAMES[wanted].lower())
        if wanted is None:
            return EndResult(outcome="unknown"), 0
        copy = request.commit_log_offset if request.commit_log_offset >= 0 \
            else entry.half_offset
        return EndPlan(entry, wanted, copy,
                       {FROM_CHECK: "true"} if request.from_check else None)

    def _end_round(self, requests: Sequence[EndRequest], start: int,
                   outcomes: list[tuple[EndResult, int] | BrokerError],
                   committed: dict[tuple[str, int], None]) -> int:
        """End ``requests`` from ``start`` up to the first one naming a half this round
        already ends; append their outcomes; return where the next round starts.

        Under the lock. Writes the round's commit records in one append, then its
        op records in another.
        """
        plans: list[EndPlan] = []
        named: set[str] = set()
        slots: list[tuple[EndResult, int] | BrokerError | None] = []
        i = start
        while i < len(requests):
            try:
                plan = self._plan_end(requests[i])
            except BrokerError as exc:
                slots.append(exc)
                i += 1
                continue
            if isinstance(plan, EndPlan):
                if plan.entry.key in named:
                    break  # answered in the next round, after this one's records
                named.add(plan.entry.key)
                plan.slot = len(slots)
                plans.append(plan)
                slots.append(None)
            else:
                slots.append(plan)
            i += 1
        self._write_ends(plans, slots, committed)
        outcomes.extend(slot for slot in slots if slot is not None)
        return i

    def _write_ends(self, plans: list[EndPlan],
                    slots: list[tuple[EndResult, int] | BrokerError | None],
                    committed: dict[tuple[str, int], None]) -> None:
        """Write the commit records, then the op records, of ``plans``; fill their slots."""
        store = self._store
        staged: list[EndPlan] = []
        records: list[MessageToStore] = []
        for plan in plans:
            if plan.wanted != COMMITTED:
                continue
            if plan.entry.commit_offset >= 0:  # written by an earlier try: wait for all since
                plan.end = store.max_offset
                continue
            try:
                records.append(self._commit_record(plan.entry, plan.copy))
            except BrokerError as exc:
                slots[plan.slot] = exc
                continue
            staged.append(plan)
        for plan, put in zip(staged, store.put_batch_nowait(records) if records else (),
                             strict=True):
            if isinstance(put, BrokerError):
                slots[plan.slot] = put
                continue
            plan.entry.commit_offset = put.physical_offset
            plan.entry.commit_queue_offset = put.queue_offset
            plan.end = max(put.end_offset, self.after_commit(plan.entry, plan.copy))
        live = [plan for plan in plans if slots[plan.slot] is None]
        ops = [op_record(p.entry, p.wanted, p.copy, p.extra) for p in live]
        for plan, put in zip(live, store.put_batch_nowait(ops) if ops else (), strict=True):
            entry = plan.entry
            if isinstance(put, BrokerError):
                if plan.wanted != COMMITTED or not isinstance(put, UnavailableError):
                    slots[plan.slot] = put
                    continue
                # committed all the same; the check loop closes it
                log.warning("transaction %s committed, its half left open: %s",
                            entry.transaction_id, put)
            else:
                self._table.settle(entry, plan.wanted)
                self._recent.drop(entry)
                plan.end = max(plan.end, put.end_offset)
            if plan.wanted == COMMITTED:
                committed[(entry.real_topic, entry.real_queue_id)] = None
                slots[plan.slot] = (self._ended(entry, already=False, state=COMMITTED),
                                    plan.end)
            else:
                slots[plan.slot] = (self._ended(entry, already=False), plan.end)

    def _validate(self, entry: HalfEntry, request: EndRequest) -> None:
        if request.producer_group != entry.producer_group:
            raise TransactionMismatchError(
                f"transaction {entry.transaction_id!r} belongs to producer group "
                f"{entry.producer_group!r}, not {request.producer_group!r}")
        if request.commit_log_offset >= 0 and request.commit_log_offset not in entry.copies:
            raise TransactionMismatchError(
                f"commit-log offset {request.commit_log_offset} does not match the half of "
                f"{entry.transaction_id!r} at {entry.half_offset}")
        if request.queue_offset >= 0 and request.queue_offset not in entry.copies.values():
            raise TransactionMismatchError(
                f"half-queue offset {request.queue_offset} does not match the half of "
                f"{entry.transaction_id!r} at {entry.queue_offset}")

    def _write_commit(self, entry: HalfEntry, copy_offset: int) -> int:
        """Write ``entry``'s commit record from the copy at ``copy_offset``; returns its end."""
        put = self._store.put_nowait(self._commit_record(entry, copy_offset))
        entry.commit_offset = put.physical_offset
        entry.commit_queue_offset = put.queue_offset
        return max(put.end_offset, self.after_commit(entry, copy_offset))

    def _commit_record(self, entry: HalfEntry, copy_offset: int) -> MessageToStore:
        """The commit record of the half copy at ``copy_offset`` (as just stored, else read
        back from the log)."""
        half: MessageToStore | StoredRecord | None = self._recent.take(copy_offset)
        if half is None:
            half = self._store.get(copy_offset)
        return commit_record(half, entry, copy_offset)

    @staticmethod
    def _ended(entry: HalfEntry, *, already: bool, state: str | None = None) -> EndResult:
        state = state or entry.state
        return EndResult(
            outcome=state if state != DISCARDED else "discarded",
            already=already, commit_log_offset=entry.commit_offset,
            queue_id=entry.real_queue_id if entry.commit_offset >= 0 else -1,
            queue_offset=entry.commit_queue_offset)
