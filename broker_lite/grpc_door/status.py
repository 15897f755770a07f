"""Errors of the gRPC door and their ``apache.rocketmq.v2.Status``.

RocketMQ's proxy answers every failure inside the response (gRPC status OK, a
``Status`` whose ``code`` is an ``apache.rocketmq.v2.Code``); the official
client turns that code into its exception (``BadRequestException``,
``UnauthorizedException``, ``NotFoundException``...). This module does the
same for broker_lite's error tree::

    GrpcDoorError            a request the door itself refuses; carries its Code
    broker_lite.errors.*     mapped by :func:`code_for` (below)
    any other exception      INTERNAL_SERVER_ERROR, logged with its traceback

The mapping of :mod:`broker_lite.errors` (native ``ResponseCode``) to ``Code``:

==============================  =================================================
TopicNotFoundError              TOPIC_NOT_FOUND
UnauthorizedError               UNAUTHORIZED (bad or missing credentials, or an
                                ACL that refuses the topic or group)
NoPermissionError               FORBIDDEN (a topic's perm, a reserved topic, a
                                broker that rejects transactions)
MessageTooLargeError            MESSAGE_BODY_TOO_LARGE
InvalidMessageError             ILLEGAL_TOPIC / ILLEGAL_MESSAGE_KEY /
                                ILLEGAL_MESSAGE_TAG / ILLEGAL_MESSAGE_PROPERTY_KEY
                                by field, else BAD_REQUEST
MessageNotFoundError            NOT_FOUND
TransactionNotFoundError        INVALID_TRANSACTION_ID
TransactionMismatch/Conflict    BAD_REQUEST (the message says which)
other RequestError              BAD_REQUEST
BrokerBusyError                 TOO_MANY_REQUESTS
RequestTimeoutError             PROXY_TIMEOUT
flush not confirmed in time     MASTER_PERSISTENCE_TIMEOUT
other BrokerError               INTERNAL_SERVER_ERROR
==============================  =================================================
"""

from __future__ import annotations

import logging
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_lite.errors import (
    BrokerBusyError,
    BrokerError,
    InvalidMessageError,
    MessageNotFoundError,
    MessageTooLargeError,
    NoPermissionError,
    RequestError,
    RequestTimeoutError,
    ResponseCode,
    TopicNotFoundError,
    TransactionNotFoundError,
    UnauthorizedError,
)

__all__ = ["Code", "GrpcDoorError", "code_for", "ok", "status", "status_for"]

log = logging.getLogger("broker_lite.grpc")

#: the ``apache.rocketmq.v2.Code`` enum (an int-valued protobuf enum)
Code: Any = pb.Code

_FIELD_CODES = {
    "topic": pb.Code.ILLEGAL_TOPIC,
    "keys": pb.Code.ILLEGAL_MESSAGE_KEY,
    "tags": pb.Code.ILLEGAL_MESSAGE_TAG,
    "properties": pb.Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
}


class GrpcDoorError(RequestError):
    """A request the gRPC door refuses before (or instead of) asking the broker.

    ``code`` is the ``apache.rocketmq.v2.Code`` it is answered with.
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def code_for(exc: BaseException) -> int:
    """The ``Code`` a failure is answered with."""
    if isinstance(exc, GrpcDoorError):
        return exc.code
    if not isinstance(exc, BrokerError):
        return int(pb.Code.INTERNAL_SERVER_ERROR)
    if exc.code == ResponseCode.FLUSH_DISK_TIMEOUT:
        return int(pb.Code.MASTER_PERSISTENCE_TIMEOUT)
    if isinstance(exc, InvalidMessageError):
        return int(_FIELD_CODES.get(exc.field, pb.Code.BAD_REQUEST))
    for cls, code in _BY_CLASS:
        if isinstance(exc, cls):
            return int(code)
    return int(pb.Code.INTERNAL_SERVER_ERROR)


_BY_CLASS: tuple[tuple[type[BaseException], int], ...] = (
    (TopicNotFoundError, pb.Code.TOPIC_NOT_FOUND),
    (UnauthorizedError, pb.Code.UNAUTHORIZED),
    (NoPermissionError, pb.Code.FORBIDDEN),
    (MessageTooLargeError, pb.Code.MESSAGE_BODY_TOO_LARGE),
    (MessageNotFoundError, pb.Code.NOT_FOUND),
    (TransactionNotFoundError, pb.Code.INVALID_TRANSACTION_ID),
    (RequestError, pb.Code.BAD_REQUEST),
    (BrokerBusyError, pb.Code.TOO_MANY_REQUESTS),
    (RequestTimeoutError, pb.Code.PROXY_TIMEOUT),
)


def status(code: int, message: str = "") -> Any:
    """A ``Status`` message; the message defaults to the code's name, as the proxy's."""
    return pb.Status(code=code, message=message or pb.Code.Name(code))


_OK = status(pb.Code.OK)


def ok() -> Any:
    """The OK ``Status``: one shared instance (protobuf copies it into a response)."""
    return _OK


def status_for(exc: BaseException, *, what: str = "request") -> Any:
    """The ``Status`` of a failure; unexpected ones are logged with their traceback."""
    code = code_for(exc)
    if code == pb.Code.INTERNAL_SERVER_ERROR and not isinstance(exc, (BrokerError,
                                                                      GrpcDoorError)):
        log.error("gRPC %s failed unexpectedly", what, exc_info=exc)
        return status(code, f"internal error: {type(exc).__name__}: {exc}")
    message = exc.message if isinstance(exc, GrpcDoorError) else str(exc)
    return status(code, message)
