"""Bodies of native-protocol frames: msgspec structs, encoded as MessagePack.

One struct per request and response body. Field names are the wire contract
between :mod:`broker_lite.server` and :mod:`broker_lite.client`; add fields at
the end with defaults, never rename.

Transaction states use RocketMQ's end-transaction values: ``COMMIT`` = 8,
``ROLLBACK`` = 12, ``UNKNOWN`` = 0 (see :class:`TxState`).
"""

from __future__ import annotations

from enum import IntEnum

import msgspec

__all__ = [
    "AckRequest",
    "Assignment",
    "Body",
    "CheckTransactionRequest",
    "CheckTransactionResponse",
    "ConsumerSubscription",
    "DeliveredMessage",
    "Empty",
    "EndTransactionBatchRequest",
    "EndTransactionBatchResponse",
    "EndTransactionRequest",
    "EndTransactionResponse",
    "ErrorBody",
    "HeartbeatRequest",
    "HelloRequest",
    "HelloResponse",
    "OffsetRequest",
    "OffsetResponse",
    "PullRequest",
    "PullResponse",
    "QueryAssignmentRequest",
    "QueryByKeyRequest",
    "QueryByKeyResponse",
    "SendBackRequest",
    "SendBatchRequest",
    "SendBatchResponse",
    "SendItemResult",
    "SendRequest",
    "SendResult",
    "TopicCreateRequest",
    "TopicInfo",
    "TopicListResponse",
    "TopicRouteRequest",
    "TxState",
    "UpdateOffsetRequest",
    "WireMessage",
]


class TxState(IntEnum):
    """End-transaction states, with RocketMQ's wire values."""

    UNKNOWN = 0
    COMMIT = 8
    ROLLBACK = 12


class Body(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every body."""


class Empty(Body, frozen=True):
    pass


class ErrorBody(Body, frozen=True):
    """Body of every response whose code is not SUCCESS."""

    message: str
    retriable: bool = False
    fields: dict[str, str | int] = {}


# -- connection ----------------------------------------------------------------


class HelloRequest(Body, frozen=True):
    """The first frame on a connection.

    With an ACL, ``signature`` is hex HMAC-SHA256, keyed by the secret of
    ``access_key``, over ``f"{client_id}\\n{timestamp_ms}\\n{nonce}"``.
    """

    client_id: str
    protocol_version: int = 1
    access_key: str = ""
    timestamp_ms: int = 0
    nonce: str = ""
    signature: str = ""


class HelloResponse(Body, frozen=True):
    broker_name: str
    protocol_version: int
    max_frame_size: int
    server_time_ms: int


class ConsumerSubscription(Body, frozen=True):
    group: str
    topic: str
    tag_expr: str = "*"
    broadcasting: bool = False


class HeartbeatRequest(Body, frozen=True):
    """Registers producer groups (for check-back) and consumer subscriptions."""

    client_id: str
    producer_groups: list[str] = []
    consumers: list[ConsumerSubscription] = []


# -- producing -------------------------------------------------------------------


class WireMessage(Body, frozen=True):
    """A message as a producer sends it."""

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] = []
    properties: dict[str, str] = {}
    flag: int = 0
    #: the client-made unique id (UNIQ_KEY); the broker makes one when empty
    msg_id: str = ""
    #: -1: the broker picks the queue (round robin, or by sharding key)
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


class SendRequest(Body, frozen=True):
    producer_group: str
    message: WireMessage


class SendResult(Body, frozen=True):
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    #: set for halves: the id to end the transaction with
    transaction_id: str = ""
    #: True when the broker had this id already (idempotent re-send of a half)
    duplicate: bool = False


class SendBatchRequest(Body, frozen=True):
    producer_group: str
    messages: list[WireMessage]


class SendItemResult(Body, frozen=True):
    code: int
    result: SendResult | None = None
    error: ErrorBody | None = None


class SendBatchResponse(Body, frozen=True):
    results: list[SendItemResult]


# -- transactions ----------------------------------------------------------------


class EndTransactionRequest(Body, frozen=True):
    producer_group: str
    transaction_id: str
    state: int  # TxState
    #: the half's commit-log and half-queue offsets, checked like RocketMQ does
    commit_log_offset: int = -1
    queue_offset: int = -1
    msg_id: str = ""
    from_check: bool = False


class EndTransactionResponse(Body, frozen=True):
    #: "committed", "rolled_back" or "unknown" (left for check-back)
    outcome: str
    #: True when this transaction had already been resolved the same way
    already: bool = False
    commit_log_offset: int = -1
    queue_id: int = -1
    queue_offset: int = -1


class EndTransactionBatchRequest(Body, frozen=True):
    items: list[EndTransactionRequest]


class EndTransactionBatchResponse(Body, frozen=True):
    #: one per item: SUCCESS with ``result``, or an error code with ``error``
    codes: list[int]
    results: list[EndTransactionResponse | None]
    errors: list[ErrorBody | None]


class CheckTransactionRequest(Body, frozen=True):
    """Broker -> producer: what happened to this local transaction?"""

    producer_group: str
    transaction_id: str
    msg_id: str
    commit_log_offset: int
    queue_offset: int
    check_times: int
    message: DeliveredMessage
    #: the renewed copy of the half this check wrote (RocketMQ's check names that copy,
    #: ``putBackHalfMsgQueue``): its commit-log and half-queue offsets; -1: none
    renewed_commit_log_offset: int = -1
    renewed_queue_offset: int = -1


class CheckTransactionResponse(Body, frozen=True):
    state: int  # TxState


# -- consuming -------------------------------------------------------------------


class DeliveredMessage(Body, frozen=True):
    """A message as a consumer receives it."""

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


class PullRequest(Body, frozen=True):
    group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int = 32
    tag_expr: str = "*"
    #: hold the request up to this long when there is nothing new
    long_poll_ms: int = 0


class PullResponse(Body, frozen=True):
    #: "found", "no_new_message" or "offset_moved"
    status: str
    messages: list[DeliveredMessage]
    next_offset: int
    min_offset: int
    max_offset: int


class QueryAssignmentRequest(Body, frozen=True):
    client_id: str
    group: str
    topic: str


class Assignment(Body, frozen=True):
    """The queues of ``topic`` this client should consume for ``group`` now."""

    topic: str
    queue_ids: list[int]
    broadcasting: bool = False


class OffsetRequest(Body, frozen=True):
    group: str
    topic: str
    queue_id: int


class OffsetResponse(Body, frozen=True):
    #: -1 when the group has never committed on this queue
    offset: int


class UpdateOffsetRequest(Body, frozen=True):
    group: str
    topic: str
    queue_id: int
    offset: int


class AckRequest(Body, frozen=True):
    """Consumed successfully: the broker advances the group's offset past it."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str


class SendBackRequest(Body, frozen=True):
    """Consume failed: redeliver later through ``%RETRY%group``, or dead-letter it."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    #: 0: the next level of the retry schedule; -1: straight to the DLQ
    delay_level: int = 0
    max_reconsume_times: int = 16


# -- admin -------------------------------------------------------------------------


class TopicCreateRequest(Body, frozen=True):
    topic: str
    queues: int = 4
    #: RocketMQ permission bits: 4 read, 2 write (6 = both)
    perm: int = 6
    #: topic attributes to set (``message.type``: NORMAL, FIFO, DELAY, TRANSACTION, MIXED)
    attributes: dict[str, str] = {}
    #: topic attributes to remove
    removed_attributes: list[str] = []


class TopicInfo(Body, frozen=True):
    topic: str
    queues: int
    perm: int
    max_offsets: list[int] = []
    attributes: dict[str, str] = {}


class TopicListResponse(Body, frozen=True):
    topics: list[TopicInfo]


class TopicRouteRequest(Body, frozen=True):
    topic: str


class QueryByKeyRequest(Body, frozen=True):
    key: str
    max_messages: int = 32


class QueryByKeyResponse(Body, frozen=True):
    messages: list[DeliveredMessage]
