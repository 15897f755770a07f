"""rocketbox's outbox side: the status table, ``publish``, the relay and the check-back.

A unit of work writes its business rows and a status row (the message) in one
database transaction; the relay turns committed rows into committed broker
messages; the broker's check-back reads the status table. See docs/design.md §3.
The Celery integration lives in :mod:`outbox.celery` (imported on demand, so
``import outbox`` does not import Celery).
"""

from __future__ import annotations

from outbox.checkback import PG_XID_PROPERTY, CheckAnswer, check_state
from outbox.checker import CheckbackResponder, run_checker
from outbox.config import Mode, Outbox, RelaySettings
from outbox.errors import (
    BrokerUnreachableError,
    ConfigurationError,
    InvalidMessageError,
    NoTransactionError,
    OutboxError,
    RelayError,
    RowFault,
    RowRefusedError,
    SerializationError,
)
from outbox.half_first import SqlStatusListener, send_in_transaction
from outbox.inbox import InboxConsumer, consumer
from outbox.models import InboxRow, TransactionRow, metadata
from outbox.publish import new_tx_id, publish
from outbox.relay import Relay, RelayReport
from outbox.serializers import JsonSerializer, RawSerializer, Serializer
from outbox.targets import Publisher, Target, TargetPublisher
from outbox.targets.broker_lite import BrokerLitePublisher

__all__ = [
    "PG_XID_PROPERTY",
    "BrokerLitePublisher",
    "BrokerUnreachableError",
    "CheckAnswer",
    "CheckbackResponder",
    "ConfigurationError",
    "InboxConsumer",
    "InboxRow",
    "InvalidMessageError",
    "JsonSerializer",
    "Mode",
    "NoTransactionError",
    "Outbox",
    "OutboxError",
    "Publisher",
    "RawSerializer",
    "Relay",
    "RelayError",
    "RelayReport",
    "RelaySettings",
    "RowFault",
    "RowRefusedError",
    "SerializationError",
    "Serializer",
    "SqlStatusListener",
    "Target",
    "TargetPublisher",
    "TransactionRow",
    "check_state",
    "consumer",
    "metadata",
    "new_tx_id",
    "publish",
    "run_checker",
    "send_in_transaction",
]
