"""What a broker_lite broker refuses in a message, for producers that check before sending.

An application that stores a message now and sends it later (rocketbox's
outbox) wants the broker's refusals at write time, not minutes later. These
are the broker's own rules (RocketMQ's), read from the leaf
:mod:`broker_lite.values` that the broker itself uses (so importing this module
does not load the storage engine):

- :func:`validate_topic`: 1 to 127 characters from ``[%|a-zA-Z0-9_-]``
  (raises :class:`~broker_lite.errors.InvalidMessageError`, ``field="topic"``);
  and :data:`SYSTEM_TOPICS` (plus any ``RMQ_SYS_`` name) belong to the broker;
- :data:`DEFAULT_MAX_MESSAGE_SIZE`: the body limit of a broker started with
  its defaults (``broker-lite serve --max-message-size``);
- :data:`MAX_PROPERTIES_BYTES` and :func:`encode_properties`: a message's
  properties (tags, keys, user properties, the broker's own) are stored in at
  most that many bytes of ``key\\x01value\\x02`` UTF-8 text.
"""

from __future__ import annotations

from broker_lite.values.names import (
    DEFAULT_MAX_MESSAGE_SIZE,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    validate_topic,
)
from broker_lite.values.properties import (
    KEYS,
    MAX_PROPERTIES_BYTES,
    SHARDING_KEY,
    TAGS,
    encode_properties,
)

__all__ = ["DEFAULT_MAX_MESSAGE_SIZE", "KEYS", "MAX_PROPERTIES_BYTES", "SHARDING_KEY",
           "SYSTEM_TOPICS", "SYSTEM_TOPIC_PREFIX", "TAGS", "encode_properties",
           "validate_topic"]
