"""Names a client meets in stored messages: the broker's own topics, the retry and
dead-letter prefixes, and the property keys operators read (transactions, retries).

They are defined with the store (:mod:`broker_lite.storage.topic_names`,
:mod:`broker_lite.storage.properties`); this module gathers them for
:mod:`broker_lite.client`, which may not import the core.
"""

from __future__ import annotations

from broker_lite.storage.properties import (
    FROM_CHECK,
    ORIGIN_MESSAGE_ID,
    PGROUP,
    RETRY_TOPIC,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TX_STATE,
    UNIQ_KEY,
)
from broker_lite.storage.topic_names import BROKER_TOPICS as SYSTEM_TOPICS
from broker_lite.storage.topic_names import (
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    TRANS_CHECK_MAX_TIME_TOPIC,
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
    "TRANSACTION_CHECK_TIMES",
    "TRANSACTION_ID",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TX_STATE",
    "UNIQ_KEY",
]
