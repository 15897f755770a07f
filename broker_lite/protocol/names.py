"""Names a client meets in stored messages: the broker's own topics, the retry and
dead-letter prefixes, and the property keys operators read (transactions, retries).

They are defined in the leaf :mod:`broker_lite.values` (:mod:`~broker_lite.values.names`,
:mod:`~broker_lite.values.properties`), which the store, the core and the client all
read; this module gathers them under one name for readers of the protocol.
"""

from __future__ import annotations

from broker_lite.values.names import (
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TRANS_CHECK_MAX_TIME_TOPIC,
)
from broker_lite.values.properties import (
    FROM_CHECK,
    ORIGIN_MESSAGE_ID,
    PGROUP,
    RETRY_TOPIC,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TX_STATE,
    UNIQ_KEY,
)

__all__ = [
    "DLQ_PREFIX",
    "FROM_CHECK",
    "HALF_TOPIC",
    "OP_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "PGROUP",
    "RETRY_PREFIX",
    "RETRY_TOPIC",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TRANSACTION_CHECK_TIMES",
    "TRANSACTION_ID",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TX_STATE",
    "UNIQ_KEY",
]
