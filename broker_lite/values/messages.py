"""The values that cross the :class:`~broker_lite.core.Broker` API, and the native wire.

One definition per value, in the leaf below the store, the core, the protocol
and the client: the core takes and returns these (re-exported as
:mod:`broker_lite.core.model`), and the native protocol
(:mod:`broker_lite.protocol.messages`) encodes the same structs as its bodies
under its wire names (``WireMessage`` is :class:`Message`,
``EndTransactionRequest`` is :class:`EndRequest`, ``PullResponse`` is
:class:`PullResult`...). So the native door hands a decoded request to the
core, and writes the core's answer, with no copy. Field names and order are
the native wire contract: add fields at the end with defaults, never rename
(``tests/broker_lite/server/test_translate.py`` pins the bytes).

The gRPC door has its own edge (:mod:`broker_lite.grpc_door.convert`). The
shapes follow RocketMQ's (a message's topic, tags, keys, properties; a half's
commit-log and half-queue offsets; a pull's next offset and the queue's
bounds).

They cover producing (:class:`Message`, :class:`SendResult`), transactions
(:class:`EndRequest`, :class:`EndResult`, :class:`CheckRequest`), consuming
(:class:`PullQuery`/:class:`PullResult`, :class:`Ack`, :class:`SendBack`,
:class:`OffsetQuery`, :class:`OffsetUpdate`, :class:`AssignmentQuery`/
:class:`Assignment`), clients (:class:`ClientRegistration` with its
:class:`Subscription` list) and admin (:class:`NewTopic`, :class:`TopicInfo`,
:class:`KeyQuery`).

They are frozen msgspec Structs: cheap to build (a door builds one per
message) and immutable once handed to the core.

Transaction states keep RocketMQ's end-transaction values, ``COMMIT`` = 8,
``ROLLBACK`` = 12, ``UNKNOWN`` = 0 (:class:`TxState`), which are also the native
protocol's.
"""

from __future__ import annotations

from enum import IntEnum

import msgspec

__all__ = [
    "FOUND",
    "NO_NEW_MESSAGE",
    "OFFSET_MOVED",
    "Ack",
    "Assignment",
    "AssignmentQuery",
    "CheckRequest",
    "ClientRegistration",
    "DeliveredMessage",
    "EndRequest",
    "EndResult",
    "Ended",
    "KeyQuery",
    "Message",
    "NewTopic",
    "OffsetQuery",
    "OffsetUpdate",
    "PullQuery",
    "PullResult",
    "SendBack",
    "SendResult",
    "Sent",
    "Subscription",
    "TopicInfo",
    "TxState",
    "Value",
]


class TxState(IntEnum):
    """How a transaction ends, with RocketMQ's end-transaction values."""

    UNKNOWN = 0
    COMMIT = 8
    ROLLBACK = 12


class Value(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of the values, and of every native-protocol body (``protocol.messages.Body``).

    ``omit_defaults`` changes nothing for the core; it keeps a body small on the
    wire (a field at its default is not written).
    """


# -- producing ---------------------------------------------------------------------


class Message(Value, frozen=True):
    """A message to store, as a producer gave it to a door."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = []
    properties: dict[str, str] = {}
    flag: int = 0
    #: the producer-made unique id (UNIQ_KEY); the core makes one when empty
    msg_id: str = ""
    #: -1: the core picks the queue (round robin, or by sharding key)
    queue_id: int = -1
    #: message group / sharding key: same key, same queue, so order holds
    sharding_key: str | None = None
    #: RocketMQ delay level (1..18); 0 = deliver now
    delay_level: int = 0
    #: absolute delivery time in ms since the epoch; 0 = use delay_level
    deliver_at_ms: int = 0
    born_timestamp: int = 0
    #: True for a half (prepared) message of a transaction
    transactional: bool = False


class SendResult(Value, frozen=True):
    """Where a sent message was stored (for a half: its real topic and queue)."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    #: -1 for a delayed message (stored later, on its delivery)
    commit_log_offset: int
    #: set for halves: the id to end the transaction with
    transaction_id: str = ""
    #: True when the core had this half's id already (an idempotent re-send)
    duplicate: bool = False


class Sent(Value, frozen=True):
    """A send's result; in ``sync`` mode a door acknowledges once ``end_offset`` is durable."""

    result: SendResult
    end_offset: int


# -- transactions --------------------------------------------------------------------


class EndRequest(Value, frozen=True):
    """Commit, roll back, or (``UNKNOWN``) leave a half for check-back."""

    producer_group: str
    transaction_id: str
    state: int  # TxState
    #: the half's commit-log and half-queue offsets (-1: not given), checked like RocketMQ
    commit_log_offset: int = -1
    queue_offset: int = -1
    msg_id: str = ""
    #: True when this answers a check-back (the op record says so)
    from_check: bool = False


class EndResult(Value, frozen=True):
    #: "committed", "rolled_back", "discarded" or "unknown" (left for check-back)
    outcome: str
    #: True when this transaction had already been resolved the same way
    already: bool = False
    #: the committed message's place (-1 when nothing was committed)
    commit_log_offset: int = -1
    queue_id: int = -1
    queue_offset: int = -1


class Ended(Value, frozen=True):
    """An end's result; in ``sync`` mode a door acknowledges once ``end_offset`` is durable."""

    response: EndResult
    end_offset: int


# -- stored messages, as consumers and check-backs see them --------------------------


class DeliveredMessage(Value, frozen=True):
    """A stored message as consumers (and check-back listeners) see it."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: bytes
    tags: str | None = None
    keys: list[str] = []
    properties: dict[str, str] = {}
    born_timestamp: int = 0
    store_timestamp: int = 0
    reconsume_times: int = 0


# -- check-back ----------------------------------------------------------------------


class CheckRequest(Value, frozen=True):
    """The check service asks a producer: what happened to this local transaction?"""

    producer_group: str
    transaction_id: str
    msg_id: str
    commit_log_offset: int
    queue_offset: int
    check_times: int
    message: DeliveredMessage
    #: the renewed copy of the half this check wrote (RocketMQ's ``putBackHalfMsgQueue``):
    #: its commit-log and half-queue offsets
    renewed_commit_log_offset: int = -1
    renewed_queue_offset: int = -1


# -- consuming -----------------------------------------------------------------------


class PullQuery(Value, frozen=True):
    """Read a queue for a consumer group from ``offset`` on (RocketMQ's pull)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    #: at most this many messages (the core keeps it within 1..1024)
    max_messages: int = 32
    #: the subscription's tag expression: ``*``, or tags joined by ``||``
    tag_expr: str = "*"


#: :attr:`PullResult.status`: messages found, or only filtered ones skipped (the offset moved on)
FOUND = "found"
#: :attr:`PullResult.status`: nothing at or past the offset yet (a door may long-poll)
NO_NEW_MESSAGE = "no_new_message"
#: :attr:`PullResult.status`: the offset is outside the queue; ``next_offset`` is a bound of it
OFFSET_MOVED = "offset_moved"


class PullResult(Value, frozen=True):
    """What a pull found, where the next one starts, and the queue's bounds then."""

    #: :data:`FOUND`, :data:`NO_NEW_MESSAGE` or :data:`OFFSET_MOVED`
    status: str
    messages: list[DeliveredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


class Ack(Value, frozen=True):
    """Consumed: the group's committed offset may advance past this message."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    #: checked against the message stored there
    msg_id: str


class SendBack(Value, frozen=True):
    """Consuming failed: redeliver later through ``%RETRY%group``, or dead-letter it."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    #: 0: the next level of the retry schedule; -1: straight to ``%DLQ%group``
    delay_level: int = 0
    #: deliveries before the DLQ (the broker's own limit caps it)
    max_reconsume_times: int = 16


class OffsetQuery(Value, frozen=True):
    """Which offset has ``group`` committed on this queue? (-1: never committed)"""

    group: str
    topic: str
    queue_id: int


class OffsetUpdate(Value, frozen=True):
    """Set ``group``'s committed offset on this queue (kept within the queue's bounds)."""

    group: str
    topic: str
    queue_id: int
    offset: int


class AssignmentQuery(Value, frozen=True):
    """Which queues of ``topic`` should ``client_id`` consume for ``group`` now?"""

    client_id: str
    group: str
    topic: str


class Assignment(Value, frozen=True):
    """The queues of ``topic`` a client should consume for its group now."""

    topic: str
    queue_ids: list[int]
    #: True when the group broadcasts: every member consumes every queue
    broadcasting: bool = False


# -- clients -------------------------------------------------------------------------


class Subscription(Value, frozen=True):
    """A consumer group's subscription to one topic, as one client declared it."""

    group: str
    topic: str
    tag_expr: str = "*"
    broadcasting: bool = False


class ClientRegistration(Value, frozen=True):
    """What a client is, as its heartbeat says: its producer groups (for check-back) and
    its subscriptions (for rebalancing). Each one replaces the client's previous one."""

    client_id: str
    producer_groups: list[str] = []
    subscriptions: list[Subscription] = []


# -- admin ---------------------------------------------------------------------------


class NewTopic(Value, frozen=True):
    """Create a topic, or change an existing one's queues, permission and attributes."""

    topic: str
    queues: int = 4
    #: RocketMQ permission bits: 4 read, 2 write (6 = both)
    perm: int = 6
    #: attributes to set (``message.type``: NORMAL, FIFO, DELAY, TRANSACTION, MIXED)
    attributes: dict[str, str] = {}
    #: attributes to remove
    removed_attributes: list[str] = []


class TopicInfo(Value, frozen=True):
    """A topic as the core has it: queues, permission, each queue's next offset, attributes."""

    topic: str
    queues: int
    perm: int
    #: per queue id, the offset the next message will get
    max_offsets: list[int] = []
    attributes: dict[str, str] = {}


class KeyQuery(Value, frozen=True):
    """Find stored messages by one of their keys (the index's lookup)."""

    key: str
    #: at most this many (the core keeps it within 1..256)
    max_messages: int = 32
