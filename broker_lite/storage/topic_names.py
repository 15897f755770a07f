"""The names of the broker's own topics and of each group's retry and dead-letter topics.

RocketMQ's names (``TopicValidator``). They live down here, with the store
that holds those topics, so that every layer above (the core's topic table,
the protocol's :mod:`~broker_lite.protocol.names` for clients) reads them
from one place.
"""

from __future__ import annotations

__all__ = ["BROKER_TOPICS", "DLQ_PREFIX", "HALF_TOPIC", "OP_TOPIC", "RETRY_PREFIX",
           "SCHEDULE_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"]

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: the topics only the broker writes
BROKER_TOPICS = frozenset({HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SCHEDULE_TOPIC})
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
