"""Request and response codes of the native protocol.

Response codes live with the error tree (:class:`broker_lite.errors.ResponseCode`),
so each error carries the code a server answers with; they are re-exported here.
"""

from __future__ import annotations

from enum import IntEnum

from broker_lite.errors import ResponseCode

__all__ = ["RequestCode", "ResponseCode"]


class RequestCode(IntEnum):
    HELLO = 1  # first frame of every connection: version, client id, credentials
    HEARTBEAT = 2
    UNREGISTER_CLIENT = 3
    SEND_MESSAGE = 10
    SEND_BATCH = 11
    PULL_MESSAGE = 20
    QUERY_ASSIGNMENT = 21
    QUERY_CONSUMER_OFFSET = 22
    UPDATE_CONSUMER_OFFSET = 23
    ACK_MESSAGE = 24
    CONSUMER_SEND_BACK = 25
    END_TRANSACTION = 40
    END_TRANSACTION_BATCH = 41
    CHECK_TRANSACTION_STATE = 42  # broker -> producer, on the producer's connection
    TOPIC_CREATE = 50
    TOPIC_LIST = 51
    TOPIC_ROUTE = 52
    QUERY_MESSAGE_BY_KEY = 60
    # operations (the console): additive, admin accounts only under an ACL
    CONSUMER_GROUPS = 70
    BROKER_STATS = 71
    TRANSACTION_LIST = 72
    BROWSE_QUEUE = 73
    RESEND_MESSAGE = 74
