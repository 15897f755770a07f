"""rocketbox's outbox side: the status table, ``publish``, the relay and the check-back.

A unit of work writes its business rows and a status row (the message) in one
database transaction; the relay turns committed rows into committed broker
messages; the broker's check-back reads the status table. See DESIGN.md §2.
"""

from __future__ import annotations

from outbox.checkback import PG_XID_PROPERTY, CheckAnswer, check_state
from outbox.config import Mode, Outbox, RelaySettings
from outbox.errors import (
    BrokerUnreachableError,
    ConfigurationError,
    NoTransactionError,
    OutboxError,
    RelayError,
    SerializationError,
)
from outbox.models import InboxRow, TransactionRow, metadata
from outbox.publish import new_tx_id, publish
from outbox.publisher import BrokerLitePublisher, Publisher
from outbox.relay import Relay, RelayReport
from outbox.serializers import JsonSerializer, RawSerializer, Serializer

__all__ = [
    "PG_XID_PROPERTY",
    "BrokerLitePublisher",
    "BrokerUnreachableError",
    "CheckAnswer",
    "ConfigurationError",
    "InboxRow",
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
    "SerializationError",
    "Serializer",
    "TransactionRow",
    "check_state",
    "metadata",
    "new_tx_id",
    "publish",
]
