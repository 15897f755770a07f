"""What the client sends and what it receives.

:class:`Message` is what a producer builds; :class:`ReceivedMessage` is what
a consumer's listener (and a transaction check-back) is given;
:class:`SendResult` is what the broker answered to a send.

These are the client's public values and are kept separate, on purpose, from
the one wire-and-core definition (:mod:`broker_lite.values.messages`, which the
native protocol encodes): they take what an application has (a ``str`` body,
keys as one string or an iterable, ``deliver_at`` as a datetime, a
``message_group`` alias) and check it at construction, they are immutable all
the way down (tuples, read-only mappings), and they name things as a
RocketMQ client does (``send_status``, ``transaction_id`` ``None`` when there
is none, ``delivered_topic`` for a retried message). :meth:`Message.to_wire`
builds the leaf's ``Message`` in one call and :meth:`SendResult.from_wire`
and :meth:`ReceivedMessage.from_wire` read the leaf's values; the leaf's
structs never reach the application. The retry and dead-letter topic names
(:func:`retry_topic`, :func:`dlq_topic`) are the leaf's
(:mod:`broker_lite.values.names`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType

import msgspec

from broker_lite.protocol import messages as m
from broker_lite.values.names import RETRY_PREFIX, dlq_topic, retry_topic
from broker_lite.values.properties import (
    DELAY,
    REAL_TOPIC,
    RETRY_TOPIC,
    TRANSACTION_ID,
    UNIQ_KEY,
    split_keys,
)

__all__ = [
    "RETRY_PREFIX",
    "Message",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "dlq_topic",
    "retry_topic",
]

MAX_DELAY_LEVEL = 18


def _keys_tuple(keys: str | Iterable[str] | None) -> tuple[str, ...]:
    if keys is None:
        return ()
    if isinstance(keys, str):
        return tuple(split_keys(keys))
    out = tuple(keys)
    if not out:
        return out
    for key in out:
        if not isinstance(key, str) or not key or " " in key:
            raise ValueError(f"each key must be a non-empty str without spaces, got {key!r}")
    return out


def _check_property(key: object, value: object) -> None:
    if not isinstance(key, str) or not isinstance(value, str):
        raise ValueError(f"property {key!r} must map a str to a str")


def _body_bytes(body: object) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise TypeError(f"body must be bytes or str, got {type(body).__name__}")


def _deliver_at_ms(deliver_at: float | datetime | None) -> int:
    if deliver_at is None:
        return 0
    if isinstance(deliver_at, datetime):
        if deliver_at.tzinfo is None:
            raise ValueError("deliver_at must be timezone-aware (or epoch seconds)")
        return int(deliver_at.timestamp() * 1000)
    if deliver_at < 0:
        raise ValueError(f"deliver_at must be epoch seconds >= 0, got {deliver_at}")
    return int(deliver_at * 1000)


@dataclass(frozen=True, slots=True, init=False)
class Message:
    """A message to send.

    ``body`` may be ``str`` (sent as UTF-8). ``keys`` is one key, several
    space-separated keys, or an iterable of keys (indexed by the broker for
    lookups). ``sharding_key`` (alias ``message_group``) pins the message to
    one queue, so messages with the same key keep their order. ``delay_level``
    (1..18, RocketMQ's schedule) or ``deliver_at`` (epoch seconds or an aware
    datetime) delays delivery. ``msg_id`` is the unique key (``UNIQ_KEY``):
    leave it empty and the broker makes one; set it (an outbox ``tx_id``) and a
    re-sent half is recognised as the same transaction.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    sharding_key: str | None = None
    delay_level: int = 0
    deliver_at_ms: int = 0
    msg_id: str = ""

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        *,
        sharding_key: str | None = None,
        message_group: str | None = None,
        delay_level: int = 0,
        deliver_at: float | datetime | None = None,
        msg_id: str = "",
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic must be a non-empty str, got {topic!r}")
        if sharding_key is None:
            sharding_key = message_group
        elif message_group is not None and sharding_key != message_group:
            raise ValueError("sharding_key and message_group are the same thing; give one")
        if delay_level and not 0 <= delay_level <= MAX_DELAY_LEVEL:
            raise ValueError(f"delay_level must be in [0, {MAX_DELAY_LEVEL}], got {delay_level}")
        props = dict(properties) if properties else {}
        for key, value in props.items():
            if type(key) is not str or type(value) is not str:  # a subclass: the full check
                _check_property(key, value)
        # a relay builds one Message per row: the common cases skip the helpers' calls
        setattr_ = object.__setattr__
        setattr_(self, "topic", topic)
        setattr_(self, "body", body if type(body) is bytes else _body_bytes(body))
        setattr_(self, "tags", tags or None)
        setattr_(self, "keys", _keys_tuple(keys))
        setattr_(self, "properties", MappingProxyType(props))
        setattr_(self, "sharding_key", sharding_key)
        setattr_(self, "delay_level", delay_level)
        setattr_(self, "deliver_at_ms", 0 if deliver_at is None else _deliver_at_ms(deliver_at))
        setattr_(self, "msg_id", msg_id)

    @property
    def message_group(self) -> str | None:
        return self.sharding_key

    @property
    def transaction_id(self) -> str | None:
        """Set on the message a transaction listener is given: the half's transaction id."""
        return self.properties.get(TRANSACTION_ID) or None

    def replace(self, **changes: object) -> Message:
        """A copy with some fields changed (same keywords as the constructor)."""
        args: dict[str, object] = {
            "topic": self.topic, "body": self.body, "tags": self.tags, "keys": self.keys,
            "properties": dict(self.properties), "sharding_key": self.sharding_key,
            "delay_level": self.delay_level, "msg_id": self.msg_id,
            "deliver_at": self.deliver_at_ms / 1000 if self.deliver_at_ms else None,
        }
        if "message_group" in changes:
            changes["sharding_key"] = changes.pop("message_group")
        args.update(changes)
        return Message(**args)  # type: ignore[arg-type]

    def _evolve(self, *, properties: dict[str, str], msg_id: str) -> Message:
        """A copy without delay, with these (valid: str to str) properties and id.

        What a transaction listener is given: :meth:`replace` would check
        every field again.
        """
        new = object.__new__(Message)
        setattr_ = object.__setattr__
        for name in ("topic", "body", "tags", "keys", "sharding_key"):
            setattr_(new, name, getattr(self, name))
        setattr_(new, "properties", MappingProxyType(properties))
        setattr_(new, "delay_level", 0)
        setattr_(new, "deliver_at_ms", 0)
        setattr_(new, "msg_id", msg_id)
        return new

    def to_wire(self, *, transactional: bool = False,
                born_timestamp: int | None = None) -> m.WireMessage:
        """The wire form. A half (``transactional``) never carries a delay.

        ``born_timestamp`` (epoch ms; default now): a batch reads the clock once.
        """
        properties = dict(self.properties)
        delay_level, deliver_at_ms = self.delay_level, self.deliver_at_ms
        if transactional:
            properties.pop(DELAY, None)
            delay_level = deliver_at_ms = 0
        return m.WireMessage(
            topic=self.topic,
            body=self.body,
            tags=self.tags,
            keys=list(self.keys),
            properties=properties,
            msg_id=self.msg_id,
            sharding_key=self.sharding_key,
            delay_level=delay_level,
            deliver_at_ms=deliver_at_ms,
            born_timestamp=(int(time.time() * 1000) if born_timestamp is None
                            else born_timestamp),
            transactional=transactional,
        )


class SendStatus(StrEnum):
    """RocketMQ's send status; a send that did not reach ``SEND_OK`` raises instead."""

    SEND_OK = "SEND_OK"


class SendResult(msgspec.Struct, frozen=True):
    """Where the broker stored a message.

    For a half message the broker answers the real ``topic`` and ``queue_id``
    the message will be committed to, but ``queue_offset`` and
    ``commit_log_offset`` are the half's (its offset in the half queue and in
    the commit log: what end-transaction checks); ``transaction_id`` is the id
    to end the transaction with. A delayed message is not in its queue yet:
    ``commit_log_offset`` is -1 and ``queue_offset`` is its place in the
    delay schedule.
    """

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    transaction_id: str | None = None
    #: the broker had this id already (a re-sent half); nothing new was stored
    duplicate: bool = False
    send_status: SendStatus = SendStatus.SEND_OK

    @classmethod
    def from_wire(cls, result: m.SendResult) -> SendResult:
        # positional: a frozen dataclass binds keywords slowly, and batches make many
        return cls(result.msg_id, result.topic, result.queue_id, result.queue_offset,
                   result.commit_log_offset, result.transaction_id or None, result.duplicate)

    def as_dict(self) -> dict[str, object]:
        return {
            "msg_id": self.msg_id,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "commit_log_offset": self.commit_log_offset,
            "transaction_id": self.transaction_id,
            "send_status": self.send_status.value,
        }


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A message as a listener sees it (RocketMQ's ``MessageExt`` / ``MessageView``).

    ``topic`` is the topic the producer sent to: a retried message (delivered
    on ``%RETRY%group``) and a half under check-back show their original
    topic; ``delivered_topic`` is the one it really came from, which acks
    use. ``transaction_id`` is set for messages of a transaction;
    ``dedupe_key`` is what an idempotent consumer should key on: the
    transaction id, else the unique key, else the message id.
    """

    topic: str
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    msg_id: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    reconsume_times: int
    born_timestamp: int
    store_timestamp: int
    delivered_topic: str
    transaction_id: str | None = None
    #: how many times the broker has checked this half (check-back only)
    check_times: int = 0

    @classmethod
    def from_wire(cls, wire: m.DeliveredMessage, *, transaction_id: str | None = None,
                  check_times: int = 0) -> ReceivedMessage:
        props = dict(wire.properties)
        topic = wire.topic
        if topic.startswith(RETRY_PREFIX) and props.get(RETRY_TOPIC):
            topic = props[RETRY_TOPIC]
        elif props.get(REAL_TOPIC):
            topic = props[REAL_TOPIC]
        # positional, in field order: a frozen dataclass binds keywords slowly, and a
        # pull delivers many
        return cls(topic, wire.body, wire.tags, tuple(wire.keys), MappingProxyType(props),
                   wire.msg_id, wire.queue_id, wire.queue_offset, wire.commit_log_offset,
                   wire.reconsume_times, wire.born_timestamp, wire.store_timestamp, wire.topic,
                   transaction_id or props.get(TRANSACTION_ID) or None, check_times)

    @property
    def text(self) -> str:
        """The body as UTF-8 text (raises UnicodeDecodeError when it is not)."""
        return self.body.decode("utf-8")

    @property
    def dedupe_key(self) -> str:
        return self.transaction_id or self.properties.get(UNIQ_KEY) or self.msg_id

    @property
    def is_retry(self) -> bool:
        return self.delivered_topic.startswith(RETRY_PREFIX)

    def with_reconsume_times(self, times: int) -> ReceivedMessage:
        return dataclasses.replace(self, reconsume_times=times)
