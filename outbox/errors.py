"""The outbox exception tree.

Every error rocketbox's outbox side raises derives from :class:`OutboxError`,
grouped by what the caller does next::

    OutboxError
    ├── ConfigurationError        fix the settings (raised at start-up)
    ├── NoTransactionError        publish() outside an open DB transaction
    ├── SerializationError        the body could not be serialized
    ├── InvalidMessageError       publish(): the broker would refuse this message
    └── RelayError                a row could not be relayed now (retriable)
        ├── BrokerUnreachableError    no request got through: no row is at fault
        └── RowRefusedError           the broker refused one row (``kind`` says why)
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "BrokerUnreachableError",
    "ConfigurationError",
    "InvalidMessageError",
    "NoTransactionError",
    "OutboxError",
    "RelayError",
    "RowFault",
    "RowRefusedError",
    "SerializationError",
]


class OutboxError(Exception):
    """Root of the outbox's errors; ``retriable`` says whether trying again may work."""

    retriable = False


class ConfigurationError(OutboxError):
    """A setting is missing or wrong; the message names it."""


class NoTransactionError(OutboxError):
    """``publish()`` needs the caller's open DB transaction, and there was none."""

    def __init__(self, what: str = "") -> None:
        super().__init__(
            "publish() must run inside an open database transaction, so the message commits "
            "or rolls back with the business rows" + (f" ({what})" if what else "")
        )


class SerializationError(OutboxError):
    """The message body could not be serialized."""


class InvalidMessageError(OutboxError, ValueError):
    """``publish()`` refused a message the broker would refuse: names the field and limit.

    Raised inside the caller's transaction, before the row is written, so the
    caller's request fails now instead of the row being parked minutes later.
    """

    def __init__(self, field: str, problem: str, *, limit: int | str | None = None) -> None:
        super().__init__(f"invalid {field}: {problem}")
        self.field = field
        self.limit = limit


class RelayError(OutboxError):
    """A row could not be relayed now; the sweeper tries again with backoff."""

    retriable = True


class BrokerUnreachableError(RelayError):
    """The broker did not answer."""


class RowFault(StrEnum):
    """Why a broker refused one row: what fixes it."""

    #: the broker may take it later (busy, a disk full, a transaction in flight)
    TRANSIENT = "transient"
    #: the setup: unknown topic, no permission, refused credentials; an operator fixes it
    CONFIG = "config"
    #: the row itself can never go as it is (too large, malformed)
    ROW_INVALID = "row_invalid"


class RowRefusedError(RelayError):
    """The broker refused one row (its half or its end); the other rows went on.

    ``str()`` is the broker's own message; ``__cause__`` the broker's error.
    The relay counts an attempt and retries with backoff whatever the
    ``kind`` (an operator may fix a topic or an ACL meanwhile), and parks the
    row after ``max_attempts``. ``retriable`` is true only for ``transient``.
    """

    def __init__(self, message: str, *, tx_id: str, kind: RowFault, target: str) -> None:
        super().__init__(message)
        self.tx_id = tx_id
        self.kind = kind
        self.target = target
        self.retriable = kind is RowFault.TRANSIENT
