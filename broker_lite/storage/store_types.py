"""What a caller hands :class:`~broker_lite.storage.store.MessageStore`, and what it gets back.

The store's value types and RocketMQ's topic rule; ``store.py`` keeps the
store itself (appends, reads, recovery, retention) and re-exports these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from broker_lite.errors import InvalidMessageError
from broker_lite.storage.record import HostAddress

__all__ = ["MessageToStore", "PutResult", "RetentionReport", "validate_topic"]

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
_NO_HOST = b"\x00" * 8


def validate_topic(topic: str) -> bytes:
    """RocketMQ's topic rule: ``[%|a-zA-Z0-9_-]``, 1 to 127 characters."""
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic):
        shown = topic if isinstance(topic, str) else type(topic).__name__
        raise InvalidMessageError(
            f"{shown!r} must be 1 to 127 characters from [%|a-zA-Z0-9_-]", field="topic"
        )
    return topic.encode("ascii")


@dataclass(frozen=True, slots=True)
class MessageToStore:
    """What a caller hands the store; the store assigns offsets and store time."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    sysflag: int = 0
    properties: Mapping[str, str] = field(default_factory=dict)
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
