"""The broker's vocabulary: its own topics, each group's retry and dead-letter
topics, RocketMQ's topic rule, and the default message-size limit.

RocketMQ's names (``TopicValidator``). This is the one place they are written:
the store (:mod:`broker_lite.storage.topic_names`), the core's topic table, the
protocol's :mod:`~broker_lite.protocol.names` and the client all read them here.
"""

from __future__ import annotations

import re

from broker_lite.errors import InvalidMessageError

__all__ = ["BROKER_TOPICS", "DEFAULT_MAX_MESSAGE_SIZE", "DLQ_PREFIX", "HALF_TOPIC", "OP_TOPIC",
           "RETRY_PREFIX", "SCHEDULE_TOPIC", "SYSTEM_GROUP_PREFIX", "SYSTEM_TOPICS",
           "SYSTEM_TOPIC_PREFIX",
           "TRANS_CHECK_MAX_TIME_TOPIC", "dlq_topic", "is_system_topic", "retry_topic",
           "validate_topic"]

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: the topics only the broker writes
BROKER_TOPICS = frozenset({HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, SCHEDULE_TOPIC})
#: the same set under the name clients and the core's topic table use
SYSTEM_TOPICS = BROKER_TOPICS
#: RocketMQ reserves every topic named so
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
#: RocketMQ reserves every consumer group named so
SYSTEM_GROUP_PREFIX = "CID_" + SYSTEM_TOPIC_PREFIX

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"

#: the body limit of a broker started with its defaults (``StoreConfig.max_message_size``)
DEFAULT_MAX_MESSAGE_SIZE = 4 * (1 << 20)

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")


def retry_topic(group: str) -> str:
    """The topic a consumer group's failed messages come back on."""
    return f"{RETRY_PREFIX}{group}"


def dlq_topic(group: str) -> str:
    """Where a group's message goes once it failed ``max_reconsume_times`` times."""
    return f"{DLQ_PREFIX}{group}"


def is_system_topic(topic: str) -> bool:
    """True for the broker's own topics and any ``RMQ_SYS_`` name (refused to producers)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def validate_topic(topic: str) -> bytes:
    """RocketMQ's topic rule: ``[%|a-zA-Z0-9_-]``, 1 to 127 characters."""
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic):
        shown = topic if isinstance(topic, str) else type(topic).__name__
        raise InvalidMessageError(
            f"{shown!r} must be 1 to 127 characters from [%|a-zA-Z0-9_-]", field="topic"
        )
    return topic.encode("ascii")
