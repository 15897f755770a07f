"""The outbox exception tree.

Every error rocketbox's outbox side raises derives from :class:`OutboxError`,
grouped by what the caller does next. Each carries a ``retriable`` flag and
structured fields (set by keyword, used in the message). Classes defined
outside this module name their module in brackets; they are importable from
there. The web-framework integrations add their own branch
(:mod:`integrations.errors`)::

    OutboxError
    │
    │  fix the configuration (each is also a ValueError)
    ├── ConfigurationError        a setting is missing or wrong: ``setting``
    │   ├── BrokerAddressError    [targets.address] a broker address that does not parse:
    │   │                         ``setting``, ``value``
    │   ├── ConsoleConfigError    [console.config] a setting the console cannot run with
    │   └── DatabaseNotReady      [cli_commands] at start: the database does not answer or
    │                             is not at the Alembic head: ``setting``
    │
    │  fix the input
    ├── InvalidMessageError       publish(): the broker would refuse it: ``field``,
    │   │                         ``limit`` (also a ValueError)
    │   └── RowTooLarge           [targets.rabbitmq_wave] a row's field over AMQP's 255-byte
    │                             short string; the RabbitMQ target refuses that row alone
    ├── SerializationError        the body could not be serialized: ``body_type``
    ├── ExportFormatError         [broker_export] a broker export line not as the format
    │                             says: ``path``, ``line``, ``field`` (also a ValueError)
    ├── CommandError              [cli_commands] a command line that cannot work;
    │                             ``code`` is the exit status
    ├── MigrationError            [migrate] Alembic refused: ``revision``
    │
    │  a bug in the caller
    ├── NoTransactionError        publish() outside an open DB transaction
    │
    │  retry later (``retriable``)
    ├── RelayError                a row could not be relayed now: ``tx_id``, ``topic``
    │   ├── BrokerUnreachableError  the broker did not answer: ``server``; no row is at fault
    │   └── RowRefusedError       the broker refused one row: ``kind`` (RowFault), ``target``
    └── NotConnected              [cli_commands] the first connection to ``--db``
                                  failed; the driver's error is the cause

Internal signals (outside the tree, they never leave their module):
``_AlreadyProcessed`` [inbox] rolls back a redelivery's transaction.
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


class ConfigurationError(OutboxError, ValueError):
    """A setting is missing or wrong; the message names it, and so does ``setting``.

    Raised at start-up, so a mistake fails fast. Also a :class:`ValueError`.
    """

    def __init__(self, message: str, *, setting: str = "") -> None:
        super().__init__(message)
        self.setting = setting


class NoTransactionError(OutboxError):
    """``publish()`` needs the caller's open DB transaction, and there was none."""

    def __init__(self, what: str = "") -> None:
        super().__init__(
            "publish() must run inside an open database transaction, so the message commits "
            "or rolls back with the business rows" + (f" ({what})" if what else "")
        )


class SerializationError(OutboxError):
    """The message body could not be serialized; ``body_type`` is the value's type."""

    def __init__(self, message: str, *, body_type: str = "") -> None:
        super().__init__(message)
        self.body_type = body_type


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
    """A row could not be relayed now; the sweeper tries again with backoff.

    ``tx_id`` and ``topic`` name the row when the error is about one.
    """

    retriable = True

    def __init__(self, message: str, *, tx_id: str = "", topic: str = "") -> None:
        super().__init__(message + (f" (tx_id {tx_id!r})" if tx_id and tx_id not in message
                                    else ""))
        self.tx_id = tx_id
        self.topic = topic


class BrokerUnreachableError(RelayError):
    """The broker did not answer; ``server`` is its address when known."""

    def __init__(self, message: str, *, server: str = "", tx_id: str = "",
                 topic: str = "") -> None:
        super().__init__(message, tx_id=tx_id, topic=topic)
        self.server = server


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

    def __init__(self, message: str, *, tx_id: str, kind: RowFault, target: str,
                 topic: str = "") -> None:
        super().__init__(message, topic=topic)  # no tx_id suffix: last_error is the broker's
        self.tx_id = tx_id
        self.kind = kind
        self.target = target
        self.retriable = kind is RowFault.TRANSIENT
