"""Bodies of native-protocol frames: msgspec structs, encoded as MessagePack.

One struct per request and response body. Field names are the wire contract
between :mod:`broker_lite.server` and :mod:`broker_lite.client`; add fields at
the end with defaults, never rename.

Every body that carries one of the core's values *is* that value: the structs
are defined once in the leaf :mod:`broker_lite.values.messages` (below the
core, the protocol and the client) and named here by their wire names
(``WireMessage`` is :class:`~broker_lite.values.messages.Message`,
``PullResponse`` is :class:`~broker_lite.values.messages.PullResult`...). The
native door decodes a request straight into the value the core takes and
encodes the core's answer as it is. Only the frames' own envelopes (hello,
batches, errors, lists) are defined here, and :class:`PullRequest`, which adds
the door's long-poll wait to the core's :class:`~broker_lite.values.messages.PullQuery`.

Transaction states use RocketMQ's end-transaction values: ``COMMIT`` = 8,
``ROLLBACK`` = 12, ``UNKNOWN`` = 0 (see :class:`TxState`).
"""

from __future__ import annotations

from broker_lite.values import messages as v

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

#: base of every body (the values' base: frozen, keyword-only, defaults omitted)
Body = v.Value
TxState = v.TxState

# -- the core's values, under their wire names -------------------------------------

#: a message as a producer sends it
WireMessage = v.Message
SendResult = v.SendResult
EndTransactionRequest = v.EndRequest
EndTransactionResponse = v.EndResult
#: broker -> producer: what happened to this local transaction?
CheckTransactionRequest = v.CheckRequest
#: a message as a consumer receives it
DeliveredMessage = v.DeliveredMessage
PullResponse = v.PullResult
QueryAssignmentRequest = v.AssignmentQuery
Assignment = v.Assignment
OffsetRequest = v.OffsetQuery
UpdateOffsetRequest = v.OffsetUpdate
AckRequest = v.Ack
SendBackRequest = v.SendBack
ConsumerSubscription = v.Subscription
TopicCreateRequest = v.NewTopic
TopicInfo = v.TopicInfo
QueryByKeyRequest = v.KeyQuery


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


class HeartbeatRequest(Body, frozen=True):
    """Registers producer groups (for check-back) and consumer subscriptions."""

    client_id: str
    producer_groups: list[str] = []
    consumers: list[ConsumerSubscription] = []


# -- producing -------------------------------------------------------------------


class SendRequest(Body, frozen=True):
    producer_group: str
    message: WireMessage


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


class EndTransactionBatchRequest(Body, frozen=True):
    items: list[EndTransactionRequest]


class EndTransactionBatchResponse(Body, frozen=True):
    #: one per item: SUCCESS with ``result``, or an error code with ``error``
    codes: list[int]
    results: list[EndTransactionResponse | None]
    errors: list[ErrorBody | None]


class CheckTransactionResponse(Body, frozen=True):
    state: int  # TxState


# -- consuming -------------------------------------------------------------------


class PullRequest(v.PullQuery, frozen=True):
    """The core's :class:`~broker_lite.values.messages.PullQuery`, plus the door's wait."""

    #: hold the request up to this long when there is nothing new
    long_poll_ms: int = 0


class OffsetResponse(Body, frozen=True):
    #: -1 when the group has never committed on this queue
    offset: int


# -- admin -------------------------------------------------------------------------


class TopicListResponse(Body, frozen=True):
    topics: list[TopicInfo]


class TopicRouteRequest(Body, frozen=True):
    topic: str


class QueryByKeyResponse(Body, frozen=True):
    messages: list[DeliveredMessage]
