"""Messages between ``apache.rocketmq.v2`` protobufs and the core's model. No I/O.

Inbound (SendMessage), one ``Message`` becomes one
:class:`~broker_lite.core.model.Message`, checked the way RocketMQ's proxy checks it
(``SendMessageActivity``), each failure with its own ``Code``:

==============================  ============================================
``system_properties.message_id``  ``msg_id``, so ``UNIQ_KEY``: the same id for
                                  consumers of either door
``tag`` / ``keys``                ``tags`` / ``keys``
``user_properties``               ``properties`` (system names refused)
``message_group``                 ``sharding_key``: one group, one queue
``delivery_timestamp``            ``deliver_at_ms`` (a DELAY message)
``message_type`` TRANSACTION      ``transactional=True`` (a half)
``orphaned_transaction_recovery_duration``  ``CHECK_IMMUNITY_TIME_IN_SECONDS``
``born_timestamp``                ``born_timestamp`` (ms)
GZIP ``body_encoding``            the body is stored decompressed, inflated
                                  as a stream that stops at ``max_message_size``
                                  (and at that plus 1 MiB for all the bodies of
                                  one request), never past it
==============================  ============================================

Outbound, a :class:`~broker_lite.core.model.DeliveredMessage` becomes a
``Message`` whose user properties are the stored properties minus the system
ones, with a CRC32 body digest, the queue id and offset, and (for consumers)
the receipt handle, delivery attempt and invisible duration.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_lite.core.model import DeliveredMessage, Message
from broker_lite.grpc_door.config import GrpcDoorConfig
from broker_lite.grpc_door.status import Code, GrpcDoorError
from broker_lite.storage.inflate import InflateBudget, InflatedTooLargeError, inflate_zlib
from broker_lite.storage.properties import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    DELAY,
    KEYS,
    ORIGIN_MESSAGE_ID,
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    RECONSUME_TIME,
    RETRY_TOPIC,
    SHARDING_KEY,
    TAGS,
    TRAN_MSG,
    TRAN_PREPARED_QUEUE_OFFSET,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    UNIQ_KEY,
)
from broker_lite.values.names import DLQ_PREFIX

__all__ = [
    "SYSTEM_PROPERTIES",
    "duration_ms",
    "timestamp_ms",
    "to_message",
    "to_proto",
]

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TRACE_CONTEXT = "TRACE_CONTEXT"

#: property names a user may not set and a consumer sees as system properties:
#: RocketMQ's ``MessageConst.STRING_HASH_SET`` plus the ones broker_lite uses
SYSTEM_PROPERTIES = frozenset({
    KEYS, TAGS, DELAY, UNIQ_KEY, TRAN_MSG, PGROUP, REAL_TOPIC, REAL_QID, RETRY_TOPIC,
    ORIGIN_MESSAGE_ID, RECONSUME_TIME, TRANSACTION_ID, TRANSACTION_CHECK_TIMES,
    TRAN_PREPARED_QUEUE_OFFSET, CHECK_IMMUNITY_TIME_IN_SECONDS, SHARDING_KEY, TIMER_DELIVER_MS,
    TRACE_CONTEXT, "TX_STATE", "WAIT", "TRACE_ON", "MSG_REGION", "MIN_OFFSET", "MAX_OFFSET",
    "BUYER_ID", "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "DUP_INFO",
    "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST",
    "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#",
})

# Java's Character.isISOControl, which the proxy's GrpcValidator uses
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MAX_MESSAGE_GROUP_BYTES = 64


def timestamp_ms(ts: Any) -> int:
    """A ``google.protobuf.Timestamp`` in ms since the epoch."""
    return int(ts.ToMilliseconds())


def duration_ms(d: Any) -> int:
    """A ``google.protobuf.Duration`` in ms."""
    return int(d.ToMilliseconds())


def _check_text(value: str, code: int, what: str) -> None:
    if not value.strip():
        raise GrpcDoorError(code, f"{what} cannot be blank")
    if _CONTROL.search(value):
        raise GrpcDoorError(code, f"{what} cannot contain a control character")


def _body(message: Any, max_body: int, budget: InflateBudget | None = None) -> bytes:
    body = bytes(message.body)
    if message.system_properties.body_encoding == pb.Encoding.GZIP:
        limit, setting = max_body, "max_message_size"
        if budget is not None and budget.left < limit:
            limit, setting = max(budget.left, 0), "max_message_size plus 1 MiB per request"
        try:
            body = inflate_zlib(body, limit, setting=setting)
        except InflatedTooLargeError as exc:
            raise GrpcDoorError(Code.MESSAGE_BODY_TOO_LARGE, str(exc)) from None
        except ValueError as exc:
            raise GrpcDoorError(Code.MESSAGE_CORRUPTED,
                                f"body is marked GZIP but does not decompress: {exc}") from None
        if budget is not None:
            budget.take(len(body))
    if not body:
        raise GrpcDoorError(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > max_body:
        raise GrpcDoorError(Code.MESSAGE_BODY_TOO_LARGE,
                            f"message body of {len(body)} bytes is over the limit of "
                            f"{max_body} bytes")
    return body


def _user_properties(message: Any, config: GrpcDoorConfig) -> dict[str, str]:
    props = dict(message.user_properties)
    if len(props) > config.max_user_properties:
        raise GrpcDoorError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                            f"{len(props)} user properties, the most is "
                            f"{config.max_user_properties}")
    size = 0
    for key, value in props.items():
        if key in SYSTEM_PROPERTIES:
            raise GrpcDoorError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                f"property {key!r} is used by the system")
        if not key or _CONTROL.search(key) or _CONTROL.search(value):
            raise GrpcDoorError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                                f"property {key!r}: names cannot be empty, and names and values "
                                "cannot contain control characters")
        size += len(key.encode()) + len(value.encode())
    if size > config.max_user_properties_bytes:
        raise GrpcDoorError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                            f"user properties take {size} bytes, the most is "
                            f"{config.max_user_properties_bytes}")
    return props


def to_message(message: Any, *, config: GrpcDoorConfig, max_body: int,
               now_ms: int, budget: InflateBudget | None = None) -> Message:
    """One inbound ``Message`` as the core's ``WireMessage``; GrpcDoorError if refused.

    ``budget``: the bytes all the GZIP bodies of one request may still inflate to.
    """
    sp = message.system_properties
    message_id = sp.message_id
    if not message_id.strip():
        raise GrpcDoorError(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if _CONTROL.search(message_id) or len(message_id) > 128:
        raise GrpcDoorError(Code.ILLEGAL_MESSAGE_ID,
                            "message id must be at most 128 characters, without control ones")
    kind = sp.message_type
    if kind in (pb.MessageType.LITE, pb.MessageType.PRIORITY) or sp.HasField("lite_topic") \
            or sp.HasField("priority"):
        raise GrpcDoorError(Code.UNSUPPORTED, "lite topics and message priorities are not "
                                              "supported by broker_lite")
    body = _body(message, max_body, budget)
    props = _user_properties(message, config)
    tag: str | None = None
    if sp.HasField("tag") and sp.tag:
        _check_text(sp.tag, Code.ILLEGAL_MESSAGE_TAG, "tag")
        if "|" in sp.tag:
            raise GrpcDoorError(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
        tag = sp.tag
    for key in sp.keys:
        _check_text(key, Code.ILLEGAL_MESSAGE_KEY, "key")
    group: str | None = None
    if sp.HasField("message_group") and sp.message_group:
        _check_text(sp.message_group, Code.ILLEGAL_MESSAGE_GROUP, "message group")
        if len(sp.message_group.encode()) >= _MAX_MESSAGE_GROUP_BYTES:
            raise GrpcDoorError(Code.ILLEGAL_MESSAGE_GROUP,
                                f"message group must be under {_MAX_MESSAGE_GROUP_BYTES} bytes")
        group = sp.message_group
    deliver_at = 0
    if sp.HasField("delivery_timestamp"):
        deliver_at = timestamp_ms(sp.delivery_timestamp)
        if deliver_at - now_ms > config.max_delay_seconds * 1000:
            raise GrpcDoorError(Code.ILLEGAL_DELIVERY_TIME,
                                f"delivery time is more than {config.max_delay_seconds:g} s away")
    transactional = kind == pb.MessageType.TRANSACTION
    if transactional:
        if group is not None or deliver_at:
            raise GrpcDoorError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                                "a transactional message cannot have a message group or a "
                                "delivery timestamp")
        if sp.HasField("orphaned_transaction_recovery_duration"):
            seconds = duration_ms(sp.orphaned_transaction_recovery_duration) / 1000
            props[CHECK_IMMUNITY_TIME_IN_SECONDS] = f"{seconds:g}"
    if sp.HasField("trace_context") and sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    born = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0
    return Message(
        topic=message.topic.name, body=body, tags=tag, keys=list(sp.keys), properties=props,
        msg_id=message_id, sharding_key=group, deliver_at_ms=deliver_at,
        born_timestamp=born, transactional=transactional)


def _message_type(props: Mapping[str, str]) -> int:
    if props.get(TRAN_MSG) == "true":
        return int(pb.MessageType.TRANSACTION)
    if DELAY in props or TIMER_DELIVER_MS in props:
        return int(pb.MessageType.DELAY)
    if SHARDING_KEY in props:
        return int(pb.MessageType.FIFO)
    return int(pb.MessageType.NORMAL)


def to_proto(view: DeliveredMessage, *, store_host: str = "",
             receipt_handle: str = "",
             delivery_attempt: int = 0, invisible_ms: int = 0) -> Any:
    """A stored message as a consumer (or a check-back) sees it over gRPC."""
    props = view.properties
    body = view.body
    sp = pb.SystemProperties(
        message_id=view.msg_id, keys=view.keys,
        body_digest=pb.Digest(type=pb.DigestType.CRC32,
                              checksum=format(zlib.crc32(body) & 0xFFFFFFFF, "08X")),
        body_encoding=pb.Encoding.IDENTITY, message_type=_message_type(props),
        store_host=store_host, queue_id=view.queue_id, queue_offset=view.queue_offset)
    sp.born_timestamp.FromMilliseconds(view.born_timestamp)
    sp.store_timestamp.FromMilliseconds(view.store_timestamp)
    if view.tags:
        sp.tag = view.tags
    group = props.get(SHARDING_KEY)
    if group:
        sp.message_group = group
    if TIMER_DELIVER_MS in props and props[TIMER_DELIVER_MS].isdigit():
        sp.delivery_timestamp.FromMilliseconds(int(props[TIMER_DELIVER_MS]))
    if TRACE_CONTEXT in props:
        sp.trace_context = props[TRACE_CONTEXT]
    if receipt_handle:
        sp.receipt_handle = receipt_handle
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    if delivery_attempt:
        sp.delivery_attempt = delivery_attempt
    if view.topic.startswith(DLQ_PREFIX) and RETRY_TOPIC in props:
        sp.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(
            topic=props[RETRY_TOPIC], message_id=props.get(ORIGIN_MESSAGE_ID, view.msg_id)))
    user = {k: v for k, v in props.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(topic=pb.Resource(name=view.topic), user_properties=user,
                      system_properties=sp, body=body)
