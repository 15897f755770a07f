"""The names of the broker's own topics and of each group's retry and dead-letter topics.

Written once, in the leaf :mod:`broker_lite.values.names` (which the client may
import without loading the store); re-exported here for the store's modules.
"""

from __future__ import annotations

from broker_lite.values.names import (
    BROKER_TOPICS,
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
)

__all__ = ["BROKER_TOPICS", "DLQ_PREFIX", "HALF_TOPIC", "OP_TOPIC", "RETRY_PREFIX",
           "SCHEDULE_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"]
