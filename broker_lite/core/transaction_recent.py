"""The halves the transaction service stored lately, kept for their commit records."""

from __future__ import annotations

from broker_lite.core.transaction_state import HalfEntry
from broker_lite.storage import MessageToStore

__all__ = ["RecentHalves"]


class RecentHalves:
    """The halves stored lately, as stored, by commit-log offset.

    A commit record copies its half's body and properties. The relay commits
    its halves right after storing them (``SEND_BATCH``, then
    ``END_TRANSACTION_BATCH``), so the service keeps what it just stored and
    builds the commit record from that instead of reading the half back and
    decoding it (about 4 us a transaction). Bounded by count and body bytes,
    oldest out first; a half not here (older, larger, a renewed copy, or after
    a restart) is read from the log as before. What it holds is what the store
    wrote, born timestamp included, so the commit record is the same either way.
    """

    def __init__(self, max_count: int = 8192, max_bytes: int = 32 << 20) -> None:
        self._items: dict[int, MessageToStore] = {}
        self._bytes = 0
        self._max_count = max_count
        self._max_bytes = max_bytes

    def add(self, offset: int, half: MessageToStore) -> None:
        if len(half.body) > self._max_bytes // 64:
            return
        self._items[offset] = half
        self._bytes += len(half.body)
        while len(self._items) > self._max_count or self._bytes > self._max_bytes:
            self._bytes -= len(self._items.pop(next(iter(self._items))).body)

    def take(self, offset: int) -> MessageToStore | None:
        half = self._items.pop(offset, None)
        if half is not None:
            self._bytes -= len(half.body)
        return half

    def drop(self, entry: HalfEntry) -> None:
        for offset in entry.copies:
            self.take(offset)
