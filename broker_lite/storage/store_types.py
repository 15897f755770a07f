"""What a caller hands :class:`~broker_lite.storage.store.MessageStore`, and what it gets back.

The store's value types and RocketMQ's topic rule; ``store.py`` keeps the
store itself (appends, reads, recovery, retention) and re-exports these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

import msgspec

from broker_lite.storage.record import HostAddress
from broker_lite.values.names import validate_topic

__all__ = ["MessageToStore", "PutResult", "RetentionReport", "validate_topic"]

_NO_HOST = b"\x00" * 8


class MessageToStore(msgspec.Struct, frozen=True, kw_only=True):
    """What a caller hands the store; the store assigns offsets and store time.

    A frozen msgspec Struct, not a frozen dataclass: one is made per record
    appended, and a frozen dataclass sets each field through
    ``object.__setattr__`` (about 1.4 us for these eleven; this is ~0.2 us).
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    sysflag: int = 0
    properties: Mapping[str, str] = {}
    born_timestamp: int = 0  # ms; 0 means "now"
    born_host: HostAddress = _NO_HOST
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    store_timestamp: int = 0  # ms; 0 means "now" (set only when rewriting a log)


class PutResult(NamedTuple):
    """Where a record went (a named tuple: one is made per append)."""

    physical_offset: int
    size: int
    queue_offset: int
    store_timestamp: int

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size


@dataclass(frozen=True, slots=True)
class RetentionReport:
    segments: int
    queue_files: int
    index_files: int
    log_min_offset: int
