"""What ``publish()`` checks before writing a row: what the broker would refuse.

A row the broker can never take is parked by the relay minutes later, long
after the request that wrote it answered 201. These checks run inside the
caller's transaction instead, so the caller's request fails at once with
:class:`~outbox.errors.InvalidMessageError` naming the field and the limit.

The rules are broker_lite's own (RocketMQ's):

- **topic**: 1 to 127 characters from ``[%|a-zA-Z0-9_-]``
  (:mod:`broker_lite.client.limits`), and not one of the broker's
  own topics (``RMQ_SYS_*``, ``SCHEDULE_TOPIC_XXXX``...);
- **body**: at most ``Outbox.max_body_size`` bytes after serialization (the
  default is broker_lite's default ``--max-message-size``, 4 MiB: set it to
  your broker's value);
- **keys**: each key non-empty, without spaces (``publish`` joins a list of
  keys with spaces, as RocketMQ's ``KEYS`` property does);
- **properties**: headers, keys, tag and message group travel as message
  properties, which the broker stores in at most 32767 bytes; the broker adds
  its own (transaction id, producer group, real topic...), so the message's
  share is :data:`MAX_PROPERTIES_BYTES` (1 KiB less); no property text may
  hold the separator bytes ``\\x01`` or ``\\x02``;
- **column sizes**: tag and message group at most 255 characters, keys 1024
  (the status table's columns; PostgreSQL would refuse more at the INSERT).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from broker_lite.client import limits
from broker_lite.errors import InvalidMessageError as BrokerInvalidMessage
from outbox.errors import InvalidMessageError
from outbox.models import transaction_table

__all__ = ["DEFAULT_MAX_BODY_SIZE", "MAX_PROPERTIES_BYTES", "check_message"]

#: broker_lite's default ``--max-message-size``
DEFAULT_MAX_BODY_SIZE: int = limits.DEFAULT_MAX_MESSAGE_SIZE
#: room left for the broker's own properties on a transactional message
_BROKER_SHARE = 1024
#: the encoded properties a message may bring (headers, keys, tag, message group)
MAX_PROPERTIES_BYTES = limits.MAX_PROPERTIES_BYTES - _BROKER_SHARE


def check_message(values: Mapping[str, Any], *, keys: str | Sequence[str] | None,
                  max_body_size: int) -> None:
    """Raise :class:`InvalidMessageError` if the broker would refuse this row's message.

    ``values`` are the columns ``publish()`` is about to write (``topic``,
    ``body``, ``tag``, ``keys``, ``message_group``, ``headers``); ``keys`` is
    what the caller passed (a list's items are keys of their own).
    """
    topic = values["topic"]
    try:
        limits.validate_topic(topic)
    except BrokerInvalidMessage:
        raise InvalidMessageError(
            "topic", f"{topic!r} must be 1 to 127 characters from [%|a-zA-Z0-9_-]",
            limit=127) from None
    if topic in limits.SYSTEM_TOPICS or topic.startswith(limits.SYSTEM_TOPIC_PREFIX):
        raise InvalidMessageError("topic", f"{topic!r} is one of the broker's own topics")
    body: bytes = values["body"]
    if len(body) > max_body_size:
        raise InvalidMessageError(
            "body", f"{len(body)} bytes serialized, over the limit of {max_body_size} bytes "
                    f"(Outbox.max_body_size; the broker's --max-message-size)",
            limit=max_body_size)
    if keys is not None and not isinstance(keys, str):
        for key in keys:
            if not key or " " in key:
                raise InvalidMessageError("keys", f"{key!r}: a key must be non-empty and hold "
                                                  "no space (a string holds keys separated by "
                                                  "spaces)")
    _check_properties(values)


def _check_properties(values: Mapping[str, Any]) -> None:
    headers: Mapping[str, Any] = values["headers"] or {}
    # as the relay sends them: headers as text, and the fields the broker stores as properties
    parts: dict[str, dict[str, str]] = {"headers": {str(k): str(v) for k, v in headers.items()}}
    for name, field in ((limits.TAGS, "tag"), (limits.KEYS, "keys"),
                        (limits.SHARDING_KEY, "message_group")):
        text = values[field]
        if text:
            column: int = getattr(transaction_table.c[field].type, "length", None) or 0
            if column and len(text) > column:
                raise InvalidMessageError(field, f"{len(text)} characters, over the limit of "
                                                 f"{column} (the {field} column)", limit=column)
            parts[field] = {name: text}
    shares = {}
    for field, part in parts.items():
        try:
            shares[field] = len(limits.encode_properties(part))
        except BrokerInvalidMessage as exc:
            raise InvalidMessageError(field, str(exc).removeprefix("invalid properties: ")
                                      ) from None
    size = sum(shares.values())
    if size > MAX_PROPERTIES_BYTES:
        field = max(shares, key=lambda name: shares[name])  # the one taking the most room
        raise InvalidMessageError(
            field, f"headers, keys, tag and message_group take {size} bytes encoded "
                   f"({field}: {shares[field]}), over the limit of {MAX_PROPERTIES_BYTES}",
            limit=MAX_PROPERTIES_BYTES)
