"""The outbox exception tree.

Every error rocketbox's outbox side raises derives from :class:`OutboxError`,
grouped by what the caller does next::

    OutboxError
    ├── ConfigurationError        fix the settings (raised at start-up)
    ├── NoTransactionError        publish() outside an open DB transaction
    ├── SerializationError        the body could not be serialized
    └── RelayError                a row could not be relayed now (retriable)
        └── BrokerUnreachableError
"""

from __future__ import annotations

__all__ = [
    "BrokerUnreachableError",
    "ConfigurationError",
    "NoTransactionError",
    "OutboxError",
    "RelayError",
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


class RelayError(OutboxError):
    """A row could not be relayed now; the sweeper tries again with backoff."""

    retriable = True


class BrokerUnreachableError(RelayError):
    """The broker did not answer."""
