"""The proxy mode's transaction data: what an EndTransaction needs, in this process only.

Apache RocketMQ 5's proxy cannot end a transaction from the EndTransaction
request alone: the broker wants the half's commit-log and half-queue offsets,
which the client never sends. So the proxy keeps them, in memory, when a half
is stored (``ProducerProcessor.fillTransactionData``) and when it relays a
check-back to a client (``AbstractProxyRelayService.
processCheckTransactionState``), under ``producerGroup@transactionId``
(``TransactionDataManager.buildKey``; a gRPC half's producer group is its topic),
each for ``transactionDataExpireMillis`` (30 s). An EndTransaction takes the
newest unexpired entry and removes it (``TransactionDataManager.
pollNoExpireTransactionData``); without one it fails with "cannot found
transaction data" (``TransactionProcessor.endTransaction``). So a second end
for the same half fails, and so does an end after the window, an end through
another proxy, or an end after the proxy restarted.

:class:`TransactionDataTable` is that table for the gRPC door's proxy mode
(``--grpc-proxy-semantics``). It lives on the event loop's thread; nothing here
blocks or does I/O.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TransactionData", "TransactionDataTable"]


@dataclass(frozen=True, slots=True, order=True)
class TransactionData:
    """One half the door may end: where it is stored, and until when this entry is valid."""

    #: monotonic seconds; entries sort by it, as the proxy's ``TransactionData.compareTo``
    expires_at: float
    commit_log_offset: int
    queue_offset: int
    transaction_id: str
    producer_group: str


class TransactionDataTable:
    """``group@transactionId`` -> the halves an EndTransaction may still end, oldest first."""

    def __init__(self, *, expire_seconds: float, max_per_key: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._expire = expire_seconds
        self._max = max_per_key
        self._clock = clock
        self._data: dict[str, list[TransactionData]] = {}

    @staticmethod
    def key(producer_group: str, transaction_id: str) -> str:
        return f"{producer_group}@{transaction_id}"

    def add(self, producer_group: str, transaction_id: str, *, commit_log_offset: int,
            queue_offset: int) -> TransactionData:
        """Keep a half's offsets for ``expire_seconds``; past ``max_per_key`` the oldest goes."""
        data = TransactionData(self._clock() + self._expire, commit_log_offset, queue_offset,
                               transaction_id, producer_group)
        entries = self._data.setdefault(self.key(producer_group, transaction_id), [])
        bisect.insort(entries, data)
        if len(entries) > self._max:
            del entries[0]
        return data

    def poll(self, producer_group: str, transaction_id: str) -> TransactionData | None:
        """The newest unexpired entry, removed; ``None`` when there is none (any more)."""
        key = self.key(producer_group, transaction_id)
        entries = self._data.get(key)
        if entries is None:
            return None
        now = self._clock()
        found: TransactionData | None = None
        while entries:
            data = entries.pop()
            if data.expires_at >= now:
                found = data
                break
        if not entries:
            del self._data[key]
        return found

    def remove(self, data: TransactionData) -> None:
        """Forget one entry (a check-back that could not be written to its client)."""
        key = self.key(data.producer_group, data.transaction_id)
        entries = self._data.get(key)
        if entries is not None and data in entries:
            entries.remove(data)
            if not entries:
                del self._data[key]

    def expire(self) -> int:
        """Drop every expired entry (the proxy's ``TransactionDataCleaner``); how many went."""
        now = self._clock()
        dropped = 0
        for key in list(self._data):
            entries = self._data[key]
            keep = bisect.bisect_left(entries, now, key=lambda d: d.expires_at)
            dropped += keep
            del entries[:keep]
            if not entries:
                del self._data[key]
        return dropped

    def __len__(self) -> int:
        return sum(len(entries) for entries in self._data.values())
