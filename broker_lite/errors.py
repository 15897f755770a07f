"""The broker_lite exception tree.

Every error the broker, its storage and its clients raise derives from
:class:`BrokerError`. Subclasses are grouped by what the caller does next, and
each carries a ``retriable`` flag and structured fields::

    BrokerError
    ├── StorageError                  the store could not do what was asked
    │   ├── MessageTooLargeError      body over the limit; nothing was written
    │   ├── InvalidMessageError       a field is malformed (topic, property...)
    │   ├── CorruptRecordError        a record failed its CRC or length check
    │   ├── OffsetOutOfRangeError     no record at that offset (yet, or anymore)
    │   ├── StoreClosedError          the store was closed
    │   └── DiskFullError             the disk refused the write (retriable)
    └── (broker, protocol and client errors are added by those layers)
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "CorruptRecordError",
    "DiskFullError",
    "InvalidMessageError",
    "MessageTooLargeError",
    "OffsetOutOfRangeError",
    "StorageError",
    "StoreClosedError",
]


class BrokerError(Exception):
    """Root of every broker_lite error.

    ``retriable`` tells a caller whether sending the same request again may
    succeed without changing anything.
    """

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class StorageError(BrokerError):
    """The message store could not do what was asked."""


class MessageTooLargeError(StorageError):
    """A message body is over the configured limit. Nothing was written."""

    def __init__(self, *, size: int, limit: int, topic: str = "") -> None:
        where = f" for topic {topic!r}" if topic else ""
        super().__init__(
            f"message body of {size} bytes{where} is over the limit of {limit} bytes"
        )
        self.size = size
        self.limit = limit
        self.topic = topic


class InvalidMessageError(StorageError):
    """A message field is malformed: names the field and what is wrong."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"invalid {field}: {message}")
        self.field = field


class CorruptRecordError(StorageError):
    """A stored record failed its CRC or length check."""

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(f"corrupt record at offset {offset}: {message}")
        self.offset = offset


class OffsetOutOfRangeError(StorageError):
    """There is no record at that offset: not written yet, or deleted."""

    def __init__(self, *, offset: int, min_offset: int, max_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the stored range [{min_offset}, {max_offset})"
        )
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset


class StoreClosedError(StorageError):
    """The store was closed; open it again to go on."""


class DiskFullError(StorageError):
    """The disk refused a write. Nothing partial was acknowledged."""

    retriable = True

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{message} ({path})")
        self.path = path
