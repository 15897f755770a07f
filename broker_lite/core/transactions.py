"""The transaction service: halves, end-transaction, op records and the check service.

It follows ROCKETMQ_SEMANTICS.md ("Broker") and stores everything in RocketMQ
5's own model (``TransactionalMessageBridge``, ``EndTransactionProcessor``), so
RocketMQ's tools read a broker_lite log and the audit reads either broker's.
The records themselves (a half, a commit, an op record, a renewed copy, a
discarded one) are written by :mod:`~broker_lite.core.transaction_records`;
this service decides when, and keeps each half's state
(:mod:`~broker_lite.core.transaction_state`). How ends are written, in rounds of
a batch, and the :meth:`~broker_lite.core.transaction_ends.TransactionEnds.after_commit`
hook are in :mod:`~broker_lite.core.transaction_ends`; how an op record resolves a
half, and the op records batched in proxy mode (``tx_op_batch_interval``), in
:mod:`~broker_lite.core.transaction_ops`; the halves kept for their commit
records in :mod:`~broker_lite.core.transaction_recent`.


* commit writes the commit record on the real topic *then* the op record;
  rollback writes only the op record; each check re-puts a renewed copy of
  the half, and a half checked too often is discarded (no op record, as in
  RocketMQ);
* **ours:** end-transaction is idempotent per transaction id; the first
  resolution wins and a conflicting later one gets
  :class:`TransactionConflictError` (RocketMQ #5574, #2694, #8158);
* **ours:** each half has its own check schedule: first check once it is
  ``tx_timeout`` old by the *broker's* store time (#9640), or the
  ``CHECK_IMMUNITY_TIME_IN_SECONDS`` the message asks for, which never spends a
  check (#8311); then one check per ``tx_check_interval``. A check is counted
  (and a copy re-put) only when a live producer of the group was there to
  receive it (#1694). After ``tx_check_max`` checks (or ``tx_max_age_hours``)
  the half is discarded. So no half outlives
  ``tx_timeout + tx_check_interval * tx_check_max`` (docs/design.md §2 (3)), give or
  take how often the service runs;
* **ours:** the state is rebuilt from the log after a restart (half copies,
  op records, discards; :mod:`~broker_lite.core.transaction_state`): a
  resolved half is never checked again (#2117, #4436) and check counts are kept;
* with ``tx_op_batch_interval`` (only the gRPC door's proxy mode sets it) the
  op record of an end is written that long after the end, as RocketMQ's
  ``TransactionalOpBatchService`` batches them, and it closes only the copy
  of the half the end named. Until it is written the half can be checked: the
  check renews it, and the renewed copy stays open after the first copy's op
  record lands (RocketMQ #8158), until an end names it. A COMMIT for a copy
  of a half already committed writes the message again (#5574). Ops waiting
  for their batch are kept in memory, as RocketMQ's are;
* a second half under a transaction id already stored returns the first
  one's result, unless the caller asks for RocketMQ's behaviour
  (``dedupe=False``: the gRPC door's proxy mode), which stores it as a half of
  its own, checked and ended on its own.

An op record without ``TX_STATE`` (RocketMQ's; broker_lite's own carry it, see
:mod:`~broker_lite.core.transaction_records`) counts as a commit when a commit
record names the half, else as a rollback.

:func:`delivered_view` (:mod:`~broker_lite.core.delivered`) is re-exported
here, where the consume path and the tools have always found it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import msgspec

from broker_lite.core.clients import Channel, ClientRegistry
from broker_lite.core.config import BrokerConfig
from broker_lite.core.delivered import delivered_view
from broker_lite.core.model import CheckRequest, EndRequest, EndResult, SendResult
from broker_lite.core.topics import TRANS_CHECK_MAX_TIME_TOPIC
from broker_lite.core.transaction_ops import TransactionOps
from broker_lite.core.transaction_recent import RecentHalves
from broker_lite.core.transaction_records import (
    check_request,
    half_record,
    write_discarded,
    write_renewed,
)
from broker_lite.core.transaction_state import (
    COMMITTED,
    DISCARDED,
    HalfEntry,
    find_commit,
    op_offsets,
    rebuild,
)
from broker_lite.errors import (
    BrokerError,
    NoPermissionError,
    UnavailableError,
)
from broker_lite.storage import MessageStore, MessageToStore, PutResult
from broker_lite.storage.properties import CHECK_IMMUNITY_TIME_IN_SECONDS, FROM_CHECK, TX_STATE

__all__ = ["FROM_CHECK", "TX_STATE", "HalfEntry", "HalfToStore", "TransactionService",
           "delivered_view", "op_offsets"]

log = logging.getLogger("broker_lite.core.transactions")

#: a half to store: the message as routed, its transaction id, real topic and real queue
HalfToStore = tuple[MessageToStore, str, str, int]


class TransactionService(TransactionOps):
    """Transaction state, rebuilt from the half and op queues at start."""

    def __init__(self, store: MessageStore, config: BrokerConfig, clients: ClientRegistry,
                 notify: Callable[[str, int], None]) -> None:
        self._store = store
        self._config = config
        self._clients = clients
        self._notify = notify
        self._lock = threading.RLock()
        self._table = rebuild(store)
        self._recent = RecentHalves()
        self._op_delay_ms = int(config.tx_op_batch_interval * 1000)
        #: ops waiting for their batch, and the copies an end named (batched mode only)
        self._batched = []
        self._ended_copies = {}
        for entry in list(self._table.pending.values()):
            commit = find_commit(store, entry)
            if commit is not None:  # crashed between the commit record and its op
                entry.commit_offset = commit.physical_offset
                entry.commit_queue_offset = commit.queue_offset
                self._close_committed(entry, commit.prepared_tx_offset)
        if self._table.entries:
            log.info("transactions rebuilt: %d halves, %d pending", len(self._table.entries),
                     len(self._table.pending))

    # -- state ---------------------------------------------------------------

    def get(self, transaction_id: str) -> HalfEntry | None:
        """The (first) half stored under ``transaction_id``."""
        return self._table.first(transaction_id)

    def halves(self, transaction_id: str) -> list[HalfEntry]:
        """Every half stored under ``transaction_id`` (more than one only with ``dedupe=False``)."""
        return list(self._table.halves(transaction_id))

    def real_topic(self, transaction_id: str, commit_log_offset: int = -1) -> str | None:
        """The topic of the half an end names (``None``: no such half); doors authorise
        the end by it. No lock: a half's topic never changes, and a dict read is atomic."""
        entry = self._table.find(transaction_id, commit_log_offset)
        return entry.real_topic if entry is not None else None

    @property
    def pending_count(self) -> int:
        return len(self._table.pending)

    def pending(self, limit: int) -> list[HalfEntry]:
        """Up to ``limit`` unresolved halves, oldest first (copies: they do not change)."""
        with self._lock:
            entries = sorted(self._table.pending.values(), key=lambda e: e.half_offset)[:limit]
            return [HalfEntry(**{f: getattr(e, f) for f in HalfEntry.__dataclass_fields__
                                 if f != "copies"}, copies=dict(e.copies))
                    for e in entries]

    def next_check_ms(self, entry: HalfEntry) -> int:
        """When the check service will next look at ``entry`` (ms since the epoch)."""
        if entry.check_times == 0:
            return entry.store_ts + max(int(self._config.tx_timeout * 1000), entry.immunity_ms)
        return entry.last_check_ms + int(self._config.tx_check_interval * 1000)

    # -- producing -----------------------------------------------------------

    def prepare(self, producer_group: str, store_msg: MessageToStore, transaction_id: str,
                real_topic: str, real_queue_id: int, *,
                dedupe: bool = True) -> tuple[SendResult, int]:
        """Store a half; a second half with the same id returns the first one's result,
        or with ``dedupe=False`` is stored as a half of its own (RocketMQ's way)."""
        self._check_accepting()
        with self._lock:
            known = self._table.first(transaction_id)
            if known is not None and dedupe:
                return self._half_result(known, duplicate=True), 0
            half = half_record(store_msg, producer_group=producer_group,
                               transaction_id=transaction_id, real_topic=real_topic,
                               real_queue_id=real_queue_id)
            put = self._store.put_nowait(half)
            entry = self._add_half(half, put, producer_group, transaction_id, real_topic,
                                   real_queue_id)
            return self._half_result(entry, duplicate=False), put.end_offset

    def prepare_batch(self, producer_group: str, halves: Sequence[HalfToStore]
                      ) -> list[tuple[SendResult, int] | BrokerError]:
        """:meth:`prepare` (with ``dedupe``) for many halves: one outcome each, in order.

        The halves not stored yet go to the store in one
        :meth:`~broker_lite.storage.MessageStore.put_batch_nowait` (one lock, one
        clock read), in order; each is stored or refused on its own. A half
        whose id is already stored, or stored earlier in the same batch, answers
        as a duplicate (with the first one's error if that one was refused).
        """
        try:
            self._check_accepting()
        except BrokerError as exc:
            return [exc] * len(halves)
        outcomes: list[tuple[SendResult, int] | BrokerError | None] = [None] * len(halves)
        with self._lock:
            table = self._table
            records: list[MessageToStore] = []
            placed: list[int] = []
            first_in_batch: dict[str, int] = {}
            for i, (store_msg, transaction_id, real_topic, real_queue_id) in enumerate(halves):
                known = table.first(transaction_id)
                if known is not None:
                    outcomes[i] = (self._half_result(known, duplicate=True), 0)
                elif transaction_id not in first_in_batch:
                    first_in_batch[transaction_id] = i
                    records.append(half_record(store_msg, producer_group=producer_group,
                                               transaction_id=transaction_id,
                                               real_topic=real_topic,
                                               real_queue_id=real_queue_id))
                    placed.append(i)
            puts = self._store.put_batch_nowait(records) if records else []
            for i, half, put in zip(placed, records, puts, strict=True):
                if isinstance(put, BrokerError):
                    outcomes[i] = put
                    continue
                _msg, transaction_id, real_topic, real_queue_id = halves[i]
                entry = self._add_half(half, put, producer_group, transaction_id, real_topic,
                                       real_queue_id)
                outcomes[i] = (self._half_result(entry, duplicate=False), put.end_offset)
            for i, outcome in enumerate(outcomes):
                if outcome is None:  # a second half of an id met earlier in this batch
                    transaction_id = halves[i][1]
                    stored = table.first(transaction_id)
                    outcomes[i] = ((self._half_result(stored, duplicate=True), 0)
                                   if stored is not None
                                   else outcomes[first_in_batch[transaction_id]])
        return [o for o in outcomes if o is not None]

    def _check_accepting(self) -> None:
        if self._config.reject_transactions:
            raise NoPermissionError("this broker rejects transactional messages "
                                    "(--reject-transactions)")

    def _add_half(self, half: MessageToStore, put: PutResult, producer_group: str,
                  transaction_id: str, real_topic: str, real_queue_id: int) -> HalfEntry:
        """Note a half just stored at ``put``: its entry, and the record for its commit."""
        self._recent.add(put.physical_offset, half if half.born_timestamp else
                         msgspec.structs.replace(half, born_timestamp=put.store_timestamp))
        immunity = half.properties.get(CHECK_IMMUNITY_TIME_IN_SECONDS)
        return self._table.add(HalfEntry(
            transaction_id, producer_group, real_topic, real_queue_id, put.physical_offset,
            put.queue_offset, put.store_timestamp,
            int(float(immunity) * 1000) if immunity else 0))

    @staticmethod
    def _half_result(entry: HalfEntry, *, duplicate: bool) -> SendResult:
        return SendResult(msg_id=entry.transaction_id, topic=entry.real_topic,
                            queue_id=entry.real_queue_id, queue_offset=entry.queue_offset,
                            commit_log_offset=entry.half_offset,
                            transaction_id=entry.transaction_id, duplicate=duplicate)

    def end(self, request: EndRequest) -> tuple[EndResult, int]:
        """Commit, roll back, or (UNKNOWN) leave for check-back. Idempotent; first wins."""
        outcome = self.end_batch((request,))[0]
        if isinstance(outcome, BrokerError):
            raise outcome
        return outcome

    def end_batch(self, requests: Sequence[EndRequest]
                  ) -> list[tuple[EndResult, int] | BrokerError]:
        """:meth:`end` for many requests: one outcome each, in order, as ending them one
        by one would answer.

        The commit records of a batch go to the store in one append
        (:meth:`~broker_lite.storage.MessageStore.put_batch_nowait`), then the op
        records, so each transaction's commit record still precedes its op
        record. A request naming a half that an earlier request of the batch is
        ending waits for the next round, after those writes, and is answered as
        it would be one by one.
        """
        if self._op_delay_ms > 0:
            return [self._end_one_batched(request) for request in requests]
        outcomes: list[tuple[EndResult, int] | BrokerError] = []
        committed: dict[tuple[str, int], None] = {}
        with self._lock:
            start = 0
            while start < len(requests):
                start = self._end_round(requests, start, outcomes, committed)
        for topic, queue_id in committed:
            self._notify(topic, queue_id)
        return outcomes

    # -- the check service -----------------------------------------------------

    def check(self, now_ms: int | None = None) -> int:
        """Run the check service once; returns how many checks were sent."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        timeout_ms = int(self._config.tx_timeout * 1000)
        interval_ms = int(self._config.tx_check_interval * 1000)
        max_age_ms = int(self._config.tx_max_age_hours * 3600 * 1000)
        sends: list[tuple[Channel, CheckRequest]] = []
        with self._lock:
            if self._op_delay_ms > 0:
                # RocketMQ knows a half is done only from its op record: a commit whose op
                # is still in its batch does not stop a check
                self._write_batched_ops(now)
            for entry in list(self._table.pending.values()):
                if entry.commit_offset >= 0 and self._op_delay_ms <= 0:
                    self._close_committed(entry)
                    continue
                age = now - entry.store_ts
                if entry.check_times == 0:
                    if age < max(timeout_ms, entry.immunity_ms):
                        continue  # young, or immune: no check spent
                elif now - entry.last_check_ms < interval_ms:
                    continue
                if entry.check_times >= self._config.tx_check_max or age > max_age_ms:
                    self._discard(entry)
                    continue
                channel = self._clients.producer_channel(entry.producer_group,
                                                        entry.real_topic)
                if channel is None:
                    continue  # nobody to ask: neither counted nor lost
                entry.check_times += 1
                entry.last_check_ms = now
                self._renew(entry)
                sends.append((channel, check_request(self._store, entry)))
        for channel, request in sends:
            try:
                channel.send_check(request)
            except Exception:
                log.exception("check-back of %s could not be sent", request.transaction_id)
        return len(sends)

    def _close_committed(self, entry: HalfEntry, copy_offset: int | None = None) -> None:
        """Write the op record a crash or a full disk kept out after ``entry``'s commit record
        (removing the copy the commit names, when known, as the end would have)."""
        copy = copy_offset if copy_offset in entry.copies else entry.latest_offset
        try:
            self._resolve(entry, COMMITTED, copy)
        except UnavailableError as exc:
            log.warning("committed transaction %s still open in the half queue: %s",
                        entry.transaction_id, exc)

    def _renew(self, entry: HalfEntry) -> None:
        """Re-put the latest copy of the half with the new check count (``putBackHalfMsgQueue``)."""
        put = write_renewed(self._store, entry)
        entry.copies[put.physical_offset] = put.queue_offset

    def _discard(self, entry: HalfEntry) -> None:
        """Copy the half to TRANS_CHECK_MAX_TIME_TOPIC (``resolveDiscardMsg``); no op record."""
        write_discarded(self._store, entry)
        self._table.settle(entry, DISCARDED)
        self._recent.drop(entry)
        log.warning("transaction %s discarded to %s after %d checks", entry.transaction_id,
                    TRANS_CHECK_MAX_TIME_TOPIC, entry.check_times)
