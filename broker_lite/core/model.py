"""The core's own model: the values that cross the :class:`~broker_lite.core.Broker` API.

The core takes and returns these types, never a door's wire format: the native
server (:mod:`broker_lite.server.translate`) and the gRPC door
(:mod:`broker_lite.grpc_door.convert`) each translate their requests into them
and the core's answers back out, at their edge. The shapes follow RocketMQ's
(a message's topic, tags, keys, properties; a half's commit-log and half-queue
offsets), so both translations stay field-for-field.

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
    "CheckRequest",
    "DeliveredMessage",
    "EndRequest",
    "EndResult",
    "Ended",
    "Message",
    "SendResult",
    "Sent",
    "TxState",
]


class TxState(IntEnum):
    """How a transaction ends, with RocketMQ's end-transaction values."""

    UNKNOWN = 0
    COMMIT = 8
    ROLLBACK = 12


class _Value(msgspec.Struct, frozen=True, kw_only=True):
    """Base of the model's values."""


# -- producing ---------------------------------------------------------------------


class Message(_Value, frozen=True):
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


class SendResult(_Value, frozen=True):
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


class Sent(_Value, frozen=True):
    """A send's result; in ``sync`` mode a door acknowledges once ``end_offset`` is durable."""

    result: SendResult
    end_offset: int


# -- transactions --------------------------------------------------------------------


class EndRequest(_Value, frozen=True):
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


class EndResult(_Value, frozen=True):
    #: "committed", "rolled_back", "discarded" or "unknown" (left for check-back)
    outcome: str
    #: True when this transaction had already been resolved the same way
    already: bool = False
    #: the committed message's place (-1 when nothing was committed)
    commit_log_offset: int = -1
    queue_id: int = -1
    queue_offset: int = -1


class Ended(_Value, frozen=True):
    """An end's result; in ``sync`` mode a door acknowledges once ``end_offset`` is durable."""

    response: EndResult
    end_offset: int


# -- consuming -----------------------------------------------------------------------


class DeliveredMessage(_Value, frozen=True):
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


class CheckRequest(_Value, frozen=True):
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
