"""Bodies of the native protocol's operations requests: what the console reads and does.

Broker stats, consumer groups and their connected clients, pending
transactions, browsing a queue (answered with a
:class:`~broker_lite.protocol.messages.PullResponse`) and resending one
message to a group. Under an ACL only admin accounts may send them. The same
rules as :mod:`broker_lite.protocol.messages` hold: MessagePack, field names
are the wire contract, new fields go at the end with defaults.
"""

from __future__ import annotations

from broker_lite.protocol.messages import Body, ConsumerSubscription

__all__ = [
    "BrokerStats",
    "BrowseRequest",
    "ClientInfo",
    "ConsumerGroupsResponse",
    "GroupOffset",
    "HalfInfo",
    "ResendRequest",
    "TransactionListRequest",
    "TransactionListResponse",
]


class GroupOffset(Body, frozen=True):
    """A consumer group's committed offset on one queue, next to the queue's bounds."""

    group: str
    topic: str
    queue_id: int
    #: -1 when the group never committed here
    committed: int
    min_offset: int
    max_offset: int


class ClientInfo(Body, frozen=True):
    """A connected client: its producer groups and (group, topic) subscriptions."""

    client_id: str
    remote_address: str = ""
    producer_groups: list[str] = []
    subscriptions: list[ConsumerSubscription] = []


class ConsumerGroupsResponse(Body, frozen=True):
    offsets: list[GroupOffset]
    clients: list[ClientInfo]


class BrokerStats(Body, frozen=True):
    broker_name: str
    #: the commit log's first and next offsets (so max - min bytes of messages are kept)
    min_offset: int
    max_offset: int
    #: bytes of every file under the data directory
    disk_bytes: int
    pending_transactions: int
    server_time_ms: int = 0


class TransactionListRequest(Body, frozen=True):
    limit: int = 200


class HalfInfo(Body, frozen=True):
    """A half waiting for its resolution, as the check service sees it."""

    transaction_id: str
    producer_group: str
    real_topic: str
    half_offset: int
    store_timestamp: int
    check_times: int
    last_check_ms: int
    #: when the check service will ask next (ms since the epoch)
    next_check_ms: int


class TransactionListResponse(Body, frozen=True):
    halves: list[HalfInfo]
    #: how many are pending in all (``halves`` stops at the request's limit)
    pending: int


class BrowseRequest(Body, frozen=True):
    """Read stored messages of a queue without a consumer group (nothing is acked)."""

    topic: str
    queue_id: int
    offset: int
    max_messages: int = 32


class ResendRequest(Body, frozen=True):
    """Put the message at ``topic/queue_id/queue_offset`` on ``%RETRY%group`` again."""

    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    group: str
