"""Op records: resolving a half, and the op records an end batches (proxy mode).

An op record removes one copy of a half from the half queue
(:func:`~broker_lite.core.transaction_records.write_op`); :meth:`TransactionOps._resolve`
writes it and marks the half resolved. With ``tx_op_batch_interval`` (only the
gRPC door's proxy mode sets it) the op record of an end is written that long
after the end, as RocketMQ's ``TransactionalOpBatchService`` batches them, and
it closes only the copy of the half the end named (see
:mod:`~broker_lite.core.transactions` for what that means for checks).

:class:`TransactionOps` holds this for
:class:`~broker_lite.core.transactions.TransactionService`, which mixes it in
(over :class:`~broker_lite.core.transaction_ends.TransactionEnds`): it works on
the service's store, half table, lock and batch, under its lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker_lite.core.model import EndRequest, EndResult
from broker_lite.core.transaction_ends import TransactionEnds, check_end_state
from broker_lite.core.transaction_records import write_op
from broker_lite.core.transaction_state import COMMITTED, PENDING, ROLLED_BACK, HalfEntry
from broker_lite.errors import BrokerError, TransactionNotFoundError, UnavailableError
from broker_lite.storage.properties import FROM_CHECK

__all__ = ["TransactionOps"]

log = logging.getLogger("broker_lite.core.transactions")


@dataclass(frozen=True, slots=True)
class _BatchedOp:
    """An op record waiting for its batch (``tx_op_batch_interval``)."""

    due_ms: int
    entry: HalfEntry
    state: str
    copy_offset: int
    extra: dict[str, str] | None


class TransactionOps(TransactionEnds):
    """Op records of :class:`~broker_lite.core.transactions.TransactionService` (a mixin)."""

    _lock: threading.RLock
    _notify: Callable[[str, int], None]
    #: how long an end's op record waits for its batch (0: written with the end)
    _op_delay_ms: int
    #: ops waiting for their batch, and the copies an end named (batched mode only)
    _batched: list[_BatchedOp]
    _ended_copies: dict[str, set[int]]

    def _resolve(self, entry: HalfEntry, state: str, copy_offset: int,
                 extra: dict[str, str] | None = None) -> int:
        """Write the op record removing ``entry``'s half copy; mark it resolved. Returns its end."""
        end_offset = self._write_op(entry, state, copy_offset, extra)
        self._table.settle(entry, state)
        self._recent.drop(entry)
        return end_offset

    def _write_op(self, entry: HalfEntry, state: str, copy_offset: int,
                  extra: dict[str, str] | None = None) -> int:
        """Write the op record removing one copy of ``entry``'s half. Returns its end."""
        return write_op(self._store, entry, state, copy_offset, extra)

    def _end_one_batched(self, request: EndRequest) -> tuple[EndResult, int] | BrokerError:
        """One end with ``tx_op_batch_interval`` (proxy mode): its op record waits."""
        try:
            check_end_state(request)
            batched = self._end_batched(request)
        except BrokerError as exc:
            return exc
        if batched is None:  # no longer pending: answered as usual
            outcomes: list[tuple[EndResult, int] | BrokerError] = []
            with self._lock:
                self._end_round((request,), 0, outcomes, {})
            return outcomes[0]
        result, end_offset, committed = batched
        if committed is not None:
            self._notify(committed.real_topic, committed.real_queue_id)
        return result, end_offset

    def _end_batched(self, request: EndRequest
                     ) -> tuple[EndResult, int, HalfEntry | None] | None:
        """``end`` as RocketMQ's broker does it: the copy named, its op record batched.

        The commit record is written at once, even for a half one of whose copies
        was committed already (#5574); the op record, which closes only this copy,
        waits ``tx_op_batch_interval``. An end naming a copy already ended
        changes nothing (the proxy's transaction data is used up by one end).
        None when the half is no longer pending (``end`` answers as usual); the
        entry is given back when a commit was written (its queue gets a message).
        """
        with self._lock:
            entry = self._table.find(request.transaction_id, request.commit_log_offset)
            if entry is None:
                raise TransactionNotFoundError(request.transaction_id)
            self._validate(entry, request)
            if entry.state != PENDING:
                return None
            wanted = {8: COMMITTED, 12: ROLLED_BACK}.get(request.state)
            if wanted is None:
                return EndResult(outcome="unknown"), 0, None
            copy = request.commit_log_offset if request.commit_log_offset >= 0 \
                else entry.half_offset
            ended = self._ended_copies.setdefault(entry.key, set())
            if copy in ended:
                return self._ended(entry, already=True, state=wanted), 0, None
            ended.add(copy)
            end_offset = 0
            if wanted == COMMITTED:
                if entry.commit_offset >= 0:
                    log.warning("transaction %s committed again (copy at %d): the op record "
                                "of its first commit was not written yet, as on RocketMQ "
                                "(#5574, #8158)", entry.transaction_id, copy)
                end_offset = self._write_commit(entry, copy)
            self._batched.append(_BatchedOp(
                int(time.time() * 1000) + self._op_delay_ms, entry, wanted, copy,
                {FROM_CHECK: "true"} if request.from_check else None))
            return (self._ended(entry, already=False, state=wanted), end_offset,
                    entry if wanted == COMMITTED else None)

    def _write_batched_ops(self, now_ms: int) -> None:
        """Write the op records whose batch is due; each closes its half only if it names
        the half's latest copy (a renewed copy stays open, as in RocketMQ)."""
        due = [op for op in self._batched if op.due_ms <= now_ms]
        if not due:
            return
        self._batched = [op for op in self._batched if op.due_ms > now_ms]
        for op in due:
            entry = op.entry
            try:
                if entry.state == PENDING and op.copy_offset == entry.latest_offset:
                    self._resolve(entry, COMMITTED if entry.commit_offset >= 0 else op.state,
                                  op.copy_offset, op.extra)
                    self._ended_copies.pop(entry.key, None)
                else:
                    self._write_op(entry, op.state, op.copy_offset, op.extra)
                    if entry.state == PENDING:
                        log.info("op record for an older copy of transaction %s: its renewed "
                                 "copy stays open until an end names it (RocketMQ #8158)",
                                 entry.transaction_id)
            except UnavailableError as exc:
                log.warning("op record of transaction %s not written: %s",
                            entry.transaction_id, exc)
