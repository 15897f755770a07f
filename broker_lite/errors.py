"""The broker_lite exception tree.

Every error the broker, its storage, its doors and its clients raise derives
from :class:`BrokerError`, grouped by what the caller does next. Each carries a
``retriable`` flag, structured fields (set by keyword, used in the message),
and the native-protocol ``code`` a server answers with (RocketMQ's
``ResponseCode`` numbers where one fits, broker_lite's own from 200). Classes
defined outside this module name their module in brackets; they are
importable from there::

    BrokerError
    │
    │  fix the configuration, then start again (each is also a ValueError)
    ├── ConfigurationError            a setting is wrong: ``setting``
    │   ├── AclFileError              [core.acl] the ACL file: ``path``
    │   └── BindRefused               [runtime] no ACL beyond loopback: ``host``
    │
    │  fix the input: the same request fails the same way
    ├── RequestError
    │   ├── MessageTooLargeError      body over the limit: ``size``, ``limit``, ``topic``
    │   │   └── InflatedTooLargeError [storage.inflate] a compressed body inflates past
    │   │                             ``limit``: ``compressed``
    │   ├── InvalidMessageError       a field is malformed: ``field``
    │   ├── OffsetOutOfRangeError     no record there: ``offset``, ``min_offset``,
    │   │                             ``max_offset``
    │   ├── TopicNotFoundError        ``topic``
    │   ├── NoPermissionError         topic or group permission, or a broker that
    │   │                             rejects transactions
    │   ├── UnauthorizedError         missing or wrong credentials
    │   ├── MessageNotFoundError      ack or send-back of an unknown message
    │   ├── TransactionNotFoundError  end-transaction for an unknown ``tx_id``
    │   ├── TransactionMismatchError  wrong producer group or half offsets
    │   ├── TransactionConflictError  ``tx_id`` already ``resolved`` the other way
    │   ├── ProtocolError             malformed frame or body, unknown code
    │   │   ├── FrameError            [protocol.frames] not a frame: ``fatal``,
    │   │   │                         ``request_id``, ``limit`` (also a ValueError)
    │   │   └── BodyError             [protocol.codec] ``body_type`` (also a ValueError)
    │   └── GrpcDoorError             [grpc_door.status] refused by the gRPC door;
    │                                 its ``code`` is an apache.rocketmq.v2 ``Code``
    │
    │  retry later (``retriable``)
    ├── UnavailableError
    │   ├── BrokerBusyError
    │   │   └── PoolFullError         [client.thread_pool] every thread busy
    │   ├── RequestTimeoutError
    │   ├── FlushTimeout              [serving.flushgate] no fsync in time: ``end_offset``
    │   ├── DiskFullError             the disk refused a write: ``path``
    │   └── BrokerUnavailableError    [client.errors] cannot connect: ``server``
    │
    │  a bug, or an operator looks at the store
    ├── StorageError                  the store's files cannot be used as they are
    │   ├── CorruptRecordError        a record failed its CRC or length check: ``offset``
    │   └── StoreClosedError          used after close
    ├── ClientClosedError             [client.errors] used after shutdown or before start
    │
    │  some of each: look at ``outcomes``
    └── BatchSendError                [client.errors] per-message results of a batch

Internal signals (outside the tree, they never leave their module): ``_Closing``
[server.connection] ends a connection's read loop.
"""
from __future__ import annotations

from enum import IntEnum

__all__ = [
    "BrokerBusyError",
    "BrokerError",
    "ConfigurationError",
    "CorruptRecordError",
    "DiskFullError",
    "InvalidMessageError",
    "MessageNotFoundError",
    "MessageTooLargeError",
    "NoPermissionError",
    "OffsetOutOfRangeError",
    "ProtocolError",
    "RequestError",
    "RequestTimeoutError",
    "ResponseCode",
    "StorageError",
    "StoreClosedError",
    "TopicNotFoundError",
    "TransactionConflictError",
    "TransactionMismatchError",
    "TransactionNotFoundError",
    "UnauthorizedError",
    "UnavailableError",
    "error_for_code",
]


class ResponseCode(IntEnum):
    """Native-protocol response codes (RocketMQ's numbers below 200)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    BAD_FRAME = 200
    FRAME_TOO_LARGE = 201
    MALFORMED_REQUEST = 202
    UNAUTHORIZED = 203
    MESSAGE_TOO_LARGE = 204
    INVALID_TOPIC = 205
    TRANSACTION_NOT_FOUND = 206
    TRANSACTION_CONFLICT = 207
    TRANSACTION_MISMATCH = 208
    MESSAGE_NOT_FOUND = 209
    DISK_FULL = 210
    REQUEST_TIMEOUT = 211


class BrokerError(Exception):
    """Root of every broker_lite error.

    ``retriable`` tells a caller whether sending the same request again may
    succeed without changing anything; ``code`` is the response code a server
    answers with (a native ``ResponseCode``; the gRPC door's own errors carry
    an ``apache.rocketmq.v2.Code``).
    """

    retriable: bool = False
    code: int = ResponseCode.SYSTEM_ERROR

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


# -- fix the configuration ----------------------------------------------------


class ConfigurationError(BrokerError, ValueError):
    """A setting is missing or wrong; ``setting`` names it (and so does the message).

    Raised when a config object or a server is built, so a mistake fails fast.
    Also a :class:`ValueError`, which is what these checks raised before.
    """

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


# -- fix the input --------------------------------------------------------------


class RequestError(BrokerError):
    """The request itself is wrong; sending it again will not help."""

    code: int = ResponseCode.MALFORMED_REQUEST


class MessageTooLargeError(RequestError):
    """A message body is over the configured limit. Nothing was written."""

    code = ResponseCode.MESSAGE_TOO_LARGE

    def __init__(self, *, size: int, limit: int, topic: str = "") -> None:
        where = f" for topic {topic!r}" if topic else ""
        super().__init__(
            f"message body of {size} bytes{where} is over the limit of {limit} bytes"
        )
        self.size = size
        self.limit = limit
        self.topic = topic


class InvalidMessageError(RequestError):
    """A message field is malformed: names the field and what is wrong."""

    code = ResponseCode.MESSAGE_ILLEGAL

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"invalid {field}: {message}")
        self.field = field
        if field == "topic":
            self.code = ResponseCode.INVALID_TOPIC


class OffsetOutOfRangeError(RequestError):
    """There is no record at that offset: not written yet, or deleted."""

    code = ResponseCode.MESSAGE_NOT_FOUND

    def __init__(self, *, offset: int, min_offset: int, max_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the stored range [{min_offset}, {max_offset})"
        )
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset


class TopicNotFoundError(RequestError):
    code = ResponseCode.TOPIC_NOT_EXIST

    def __init__(self, topic: str, *, hint: str = "") -> None:
        super().__init__(f"topic {topic!r} does not exist{hint}")
        self.topic = topic


class NoPermissionError(RequestError):
    code = ResponseCode.NO_PERMISSION


class UnauthorizedError(RequestError):
    code = ResponseCode.UNAUTHORIZED


class MessageNotFoundError(RequestError):
    code = ResponseCode.MESSAGE_NOT_FOUND


class TransactionNotFoundError(RequestError):
    """No half message with that transaction id ("Find prepared transaction message failed")."""

    code = ResponseCode.TRANSACTION_NOT_FOUND

    def __init__(self, tx_id: str) -> None:
        super().__init__(
            f"find prepared transaction message failed: no half with transaction id "
            f"{tx_id!r}"
        )
        self.tx_id = tx_id

    @property
    def transaction_id(self) -> str:
        """The former name of :attr:`tx_id`."""
        return self.tx_id


class TransactionMismatchError(RequestError):
    """The producer group or the half's offsets do not match the stored half."""

    code = ResponseCode.TRANSACTION_MISMATCH


class TransactionConflictError(RequestError):
    """The transaction was already resolved the other way; the first resolution wins."""

    code = ResponseCode.TRANSACTION_CONFLICT

    def __init__(self, tx_id: str, resolved: str, requested: str) -> None:
        super().__init__(
            f"transaction {tx_id!r} is already {resolved}; {requested} refused "
            f"(the first resolution wins)"
        )
        self.tx_id = tx_id
        self.resolved = resolved
        self.requested = requested

    @property
    def transaction_id(self) -> str:
        """The former name of :attr:`tx_id`."""
        return self.tx_id


class ProtocolError(RequestError):
    """A malformed frame or body, or an unknown request code."""

    code = ResponseCode.BAD_FRAME

    def __init__(self, message: str, *, code: ResponseCode = ResponseCode.BAD_FRAME) -> None:
        super().__init__(message)
        self.code = code


# -- retry later ----------------------------------------------------------------


class UnavailableError(BrokerError):
    """The broker cannot serve this now; the same request may succeed later."""

    retriable = True
    code = ResponseCode.SERVICE_NOT_AVAILABLE


class BrokerBusyError(UnavailableError):
    code = ResponseCode.SYSTEM_BUSY


class RequestTimeoutError(UnavailableError):
    code = ResponseCode.REQUEST_TIMEOUT


class DiskFullError(UnavailableError):
    """The disk refused a write. Nothing partial was acknowledged."""

    code = ResponseCode.DISK_FULL

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{message} ({path})")
        self.path = path


# -- a bug, or an operator looks at the store -------------------------------------


class StorageError(BrokerError):
    """The message store or its files cannot be used as they are; the message says why."""

    code = ResponseCode.SYSTEM_ERROR


class CorruptRecordError(StorageError):
    """A stored record failed its CRC or length check."""

    def __init__(self, message: str, *, offset: int) -> None:
        super().__init__(f"corrupt record at offset {offset}: {message}")
        self.offset = offset


class StoreClosedError(StorageError):
    """The store was closed; open it again to go on."""


_BY_CODE: dict[int, type[BrokerError]] = {
    ResponseCode.TOPIC_NOT_EXIST: TopicNotFoundError,
    ResponseCode.NO_PERMISSION: NoPermissionError,
    ResponseCode.UNAUTHORIZED: UnauthorizedError,
    ResponseCode.MESSAGE_NOT_FOUND: MessageNotFoundError,
    ResponseCode.TRANSACTION_MISMATCH: TransactionMismatchError,
    ResponseCode.MESSAGE_TOO_LARGE: MessageTooLargeError,
    ResponseCode.MESSAGE_ILLEGAL: InvalidMessageError,
    ResponseCode.INVALID_TOPIC: RequestError,
    ResponseCode.MALFORMED_REQUEST: RequestError,
    ResponseCode.BAD_FRAME: ProtocolError,
    ResponseCode.FRAME_TOO_LARGE: ProtocolError,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: ProtocolError,
    ResponseCode.VERSION_NOT_SUPPORTED: ProtocolError,
    ResponseCode.TRANSACTION_NOT_FOUND: TransactionNotFoundError,
    ResponseCode.TRANSACTION_CONFLICT: TransactionConflictError,
    ResponseCode.DISK_FULL: DiskFullError,
    ResponseCode.SYSTEM_BUSY: BrokerBusyError,
    ResponseCode.SERVICE_NOT_AVAILABLE: UnavailableError,
    ResponseCode.REQUEST_TIMEOUT: RequestTimeoutError,
    ResponseCode.FLUSH_DISK_TIMEOUT: UnavailableError,
}


def error_for_code(code: int, message: str, *, retriable: bool | None = None) -> BrokerError:
    """The client-side exception for an error response (keeps the server's code).

    The class is the one the server raised, so ``except TransactionConflictError``
    works on both sides; structured fields of the server-side instance are not
    carried, only the message.
    """
    cls = _BY_CODE.get(code, BrokerError)
    exc = BrokerError.__new__(cls)
    BrokerError.__init__(exc, message, retriable=retriable)
    try:
        exc.code = ResponseCode(code)
    except ValueError:
        exc.code = ResponseCode.SYSTEM_ERROR
    return exc
