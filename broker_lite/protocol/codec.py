"""Encoding and decoding of frame bodies (MessagePack through msgspec), no I/O."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from broker_lite.errors import ProtocolError, ResponseCode
from broker_lite.protocol import messages as m
from broker_lite.protocol import ops_messages as ops
from broker_lite.protocol.codes import RequestCode

__all__ = ["REQUEST_TYPES", "RESPONSE_TYPES", "BodyError", "decode", "encode"]

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {}

#: the body type of each request code
REQUEST_TYPES: dict[int, type[Any]] = {
    RequestCode.HELLO: m.HelloRequest,
    RequestCode.HEARTBEAT: m.HeartbeatRequest,
    RequestCode.UNREGISTER_CLIENT: m.HeartbeatRequest,
    RequestCode.SEND_MESSAGE: m.SendRequest,
    RequestCode.SEND_BATCH: m.SendBatchRequest,
    RequestCode.PULL_MESSAGE: m.PullRequest,
    RequestCode.QUERY_ASSIGNMENT: m.QueryAssignmentRequest,
    RequestCode.QUERY_CONSUMER_OFFSET: m.OffsetRequest,
    RequestCode.UPDATE_CONSUMER_OFFSET: m.UpdateOffsetRequest,
    RequestCode.ACK_MESSAGE: m.AckRequest,
    RequestCode.CONSUMER_SEND_BACK: m.SendBackRequest,
    RequestCode.END_TRANSACTION: m.EndTransactionRequest,
    RequestCode.END_TRANSACTION_BATCH: m.EndTransactionBatchRequest,
    RequestCode.CHECK_TRANSACTION_STATE: m.CheckTransactionRequest,
    RequestCode.TOPIC_CREATE: m.TopicCreateRequest,
    RequestCode.TOPIC_LIST: m.Empty,
    RequestCode.TOPIC_ROUTE: m.TopicRouteRequest,
    RequestCode.QUERY_MESSAGE_BY_KEY: m.QueryByKeyRequest,
    RequestCode.CONSUMER_GROUPS: m.Empty,
    RequestCode.BROKER_STATS: m.Empty,
    RequestCode.TRANSACTION_LIST: ops.TransactionListRequest,
    RequestCode.BROWSE_QUEUE: ops.BrowseRequest,
    RequestCode.RESEND_MESSAGE: ops.ResendRequest,
}

#: the body type of each request code's successful response
RESPONSE_TYPES: dict[int, type[Any]] = {
    RequestCode.HELLO: m.HelloResponse,
    RequestCode.HEARTBEAT: m.Empty,
    RequestCode.UNREGISTER_CLIENT: m.Empty,
    RequestCode.SEND_MESSAGE: m.SendResult,
    RequestCode.SEND_BATCH: m.SendBatchResponse,
    RequestCode.PULL_MESSAGE: m.PullResponse,
    RequestCode.QUERY_ASSIGNMENT: m.Assignment,
    RequestCode.QUERY_CONSUMER_OFFSET: m.OffsetResponse,
    RequestCode.UPDATE_CONSUMER_OFFSET: m.Empty,
    RequestCode.ACK_MESSAGE: m.Empty,
    RequestCode.CONSUMER_SEND_BACK: m.Empty,
    RequestCode.END_TRANSACTION: m.EndTransactionResponse,
    RequestCode.END_TRANSACTION_BATCH: m.EndTransactionBatchResponse,
    RequestCode.CHECK_TRANSACTION_STATE: m.CheckTransactionResponse,
    RequestCode.TOPIC_CREATE: m.TopicInfo,
    RequestCode.TOPIC_LIST: m.TopicListResponse,
    RequestCode.TOPIC_ROUTE: m.TopicInfo,
    RequestCode.QUERY_MESSAGE_BY_KEY: m.QueryByKeyResponse,
    RequestCode.CONSUMER_GROUPS: ops.ConsumerGroupsResponse,
    RequestCode.BROKER_STATS: ops.BrokerStats,
    RequestCode.TRANSACTION_LIST: ops.TransactionListResponse,
    RequestCode.BROWSE_QUEUE: m.PullResponse,
    RequestCode.RESEND_MESSAGE: m.SendResult,
}


class BodyError(ProtocolError, ValueError):
    """A body that does not decode as the type its code calls for: ``body_type``."""

    def __init__(self, message: str, *, body_type: str = "") -> None:
        super().__init__(message, code=ResponseCode.MALFORMED_REQUEST)
        self.body_type = body_type


def encode(body: Any) -> bytes:
    return _encoder.encode(body)


#: each body's wire name, which errors report (a core value's own class name may differ:
#: ``EndTransactionRequest`` is :class:`~broker_lite.values.messages.EndRequest`)
_WIRE_NAMES: dict[type[Any], str] = {
    getattr(m, name): name for name in m.__all__ if name not in {"Body", "TxState"}}


def decode(data: bytes, kind: type[T]) -> T:
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.msgpack.Decoder(kind)
    try:
        result: T = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        name = _WIRE_NAMES.get(kind, kind.__name__)
        raise BodyError(f"malformed {name}: {exc}", body_type=name) from exc
    return result
