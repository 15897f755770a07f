"""Configuration of the message store, a frozen dataclass passed by keyword."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from broker_lite.errors import ConfigurationError
from broker_lite.storage.flush import FlushMode
from broker_lite.values.names import DEFAULT_MAX_MESSAGE_SIZE

__all__ = ["StoreConfig"]

MiB = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """How a :class:`MessageStore` lays out and flushes its files.

    The defaults suit a production broker; tests use tiny segments so that
    files roll over often.
    """

    data_dir: Path
    #: bytes per commit-log segment (RocketMQ uses 1 GiB; we default to 64 MiB)
    segment_size: int = 64 * MiB
    #: the largest message body accepted, in bytes
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    #: ``async``: acknowledged once in the page cache, flushed every ``flush_interval``;
    #: ``sync``: acknowledged after ``fdatasync`` (group commit)
    flush: FlushMode = "async"
    flush_interval: float = 0.5
    checkpoint_interval: float = 1.0
    #: 20-byte units per consume-queue file (RocketMQ: 300,000)
    units_per_queue_file: int = 300_000
    #: hash slots and entries per key-index file
    index_slots: int = 131_072
    index_entries: int = 1_000_000
    #: segments whose last write is older than this many hours may be deleted
    retention_hours: float = 72.0
    #: the host:port written as the store host of every record (``[v6]:port`` for IPv6)
    store_host: str = "127.0.0.1:10911"
    #: end every record with RocketMQ's ``__CRC32#`` property, a CRC of the whole
    #: record (RocketMQ's ``enabledAppendPropCRC``); fixed when the directory is created
    append_prop_crc: bool = True

    def __post_init__(self) -> None:
        if self.flush not in ("async", "sync"):
            raise ConfigurationError(f"flush must be 'async' or 'sync', not {self.flush!r}",
                                     setting="flush")
        if self.segment_size < 4096:
            raise ConfigurationError(
                f"segment_size must be at least 4096 bytes, got {self.segment_size}",
                setting="segment_size")
        if self.max_message_size <= 0:
            raise ConfigurationError("max_message_size must be positive",
                                     setting="max_message_size")
        if self.units_per_queue_file <= 0 or self.index_slots <= 0 or self.index_entries <= 0:
            raise ConfigurationError("queue and index file sizes must be positive",
                                     setting="units_per_queue_file, index_slots, index_entries")
