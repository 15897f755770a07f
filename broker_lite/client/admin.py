"""Admin requests: create and list topics, a topic's route, messages by key; and the
operations console's: consumer groups and offsets, broker stats, pending halves, browsing
a queue, resending a message to a group, resetting a group's offset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from broker_lite.client.config import ClientConfig, build_config
from broker_lite.client.message import ReceivedMessage
from broker_lite.client.session import Session, SessionClient
from broker_lite.client.sync_client import SyncClient
from broker_lite.protocol import RequestCode, names
from broker_lite.protocol import messages as m
from broker_lite.protocol import ops_messages as ops

__all__ = [
    "Admin",
    "AsyncAdmin",
    "BrokerStats",
    "BrowseResult",
    "ClientInfo",
    "ConsumerGroups",
    "GroupOffset",
    "HalfInfo",
    "PendingTransactions",
    "StoredMessage",
    "TopicInfo",
    "names",
]

#: a topic's name, queue count, permission (4 read, 2 write) and each queue's max offset
TopicInfo = m.TopicInfo
#: what the operations requests answer (see :class:`AsyncAdmin`)
ConsumerGroups = ops.ConsumerGroupsResponse
GroupOffset = ops.GroupOffset
ClientInfo = ops.ClientInfo
BrokerStats = ops.BrokerStats
PendingTransactions = ops.TransactionListResponse
HalfInfo = ops.HalfInfo
BrowseResult = m.PullResponse
#: a stored message as the broker returns it (browsing)
StoredMessage = m.DeliveredMessage


class AsyncAdmin(SessionClient):
    def __init__(self, server: str | None = None, *, access_key: str | None = None,
                 secret_key: str | None = None, timeout: float | None = None,
                 config: ClientConfig | None = None) -> None:
        self.config = build_config(server, access_key=access_key, secret_key=secret_key,
                                   timeout=timeout, config=config)
        self.session = Session(self.config)

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6, *,
                           attributes: Mapping[str, str] | None = None,
                           removed_attributes: Sequence[str] = ()) -> TopicInfo:
        """Create ``topic`` (or grow its queues / change its permission).

        ``attributes`` are RocketMQ topic attributes to set, e.g.
        ``{"message.type": "TRANSACTION"}`` (``mqadmin updateTopic -a
        +message.type=TRANSACTION``); ``removed_attributes`` are dropped.
        """
        return await self.session.request(
            RequestCode.TOPIC_CREATE,
            m.TopicCreateRequest(topic=topic, queues=queues, perm=perm,
                                 attributes=dict(attributes or {}),
                                 removed_attributes=list(removed_attributes)),
            m.TopicInfo)

    async def list_topics(self) -> list[TopicInfo]:
        response = await self.session.request(RequestCode.TOPIC_LIST, m.Empty(),
                                              m.TopicListResponse)
        return list(response.topics)

    async def topic_route(self, topic: str) -> TopicInfo:
        return await self.session.request(RequestCode.TOPIC_ROUTE,
                                          m.TopicRouteRequest(topic=topic), m.TopicInfo)

    async def query_by_key(self, key: str, max_messages: int = 32) -> list[ReceivedMessage]:
        """Stored messages whose keys (or unique key) include ``key``."""
        response = await self.session.request(
            RequestCode.QUERY_MESSAGE_BY_KEY,
            m.QueryByKeyRequest(key=key, max_messages=max_messages), m.QueryByKeyResponse)
        return [ReceivedMessage.from_wire(d) for d in response.messages]

    async def consumer_groups(self) -> ConsumerGroups:
        """Each group's committed offset per queue (with the queue's bounds), and clients."""
        return await self.session.request(RequestCode.CONSUMER_GROUPS, m.Empty(),
                                          ops.ConsumerGroupsResponse)

    async def broker_stats(self) -> BrokerStats:
        return await self.session.request(RequestCode.BROKER_STATS, m.Empty(), ops.BrokerStats)

    async def pending_transactions(self, limit: int = 200) -> PendingTransactions:
        return await self.session.request(RequestCode.TRANSACTION_LIST,
                                          ops.TransactionListRequest(limit=limit),
                                          ops.TransactionListResponse)

    async def browse(self, topic: str, queue_id: int = 0, offset: int = -1,
                     max_messages: int = 32) -> BrowseResult:
        """Stored messages of a queue from ``offset`` (-1: the newest), acking nothing."""
        return await self.session.request(
            RequestCode.BROWSE_QUEUE, ops.BrowseRequest(topic=topic, queue_id=queue_id,
                                                      offset=offset, max_messages=max_messages),
            m.PullResponse)

    async def resend(self, topic: str, queue_id: int, queue_offset: int, msg_id: str,
                     group: str) -> m.SendResult:
        """Put a stored message (a dead letter) on ``%RETRY%group``, due now."""
        return await self.session.request(
            RequestCode.RESEND_MESSAGE, ops.ResendRequest(topic=topic, queue_id=queue_id,
                                                        queue_offset=queue_offset,
                                                        msg_id=msg_id, group=group),
            m.SendResult)

    async def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set ``group``'s committed offset (clamped to the queue's bounds)."""
        await self.session.request(
            RequestCode.UPDATE_CONSUMER_OFFSET, m.UpdateOffsetRequest(
                group=group, topic=topic, queue_id=queue_id, offset=offset), m.Empty)


class Admin(SyncClient[AsyncAdmin]):
    """The sync admin client."""

    _kind = "admin client"

    def __init__(self, server: str | None = None, *, access_key: str | None = None,
                 secret_key: str | None = None, timeout: float | None = None,
                 config: ClientConfig | None = None) -> None:
        self._async = AsyncAdmin(server, access_key=access_key, secret_key=secret_key,
                                 timeout=timeout, config=config)
        self._loop = None

    def _loop_name(self) -> str:
        return "broker-lite-admin"

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6, *,
                     attributes: Mapping[str, str] | None = None,
                     removed_attributes: Sequence[str] = ()) -> TopicInfo:
        return self._running().run(self._async.create_topic(
            topic, queues, perm, attributes=attributes, removed_attributes=removed_attributes))

    def list_topics(self) -> list[TopicInfo]:
        return self._running().run(self._async.list_topics())

    def topic_route(self, topic: str) -> TopicInfo:
        return self._running().run(self._async.topic_route(topic))

    def query_by_key(self, key: str, max_messages: int = 32) -> list[ReceivedMessage]:
        return self._running().run(self._async.query_by_key(key, max_messages))

    def consumer_groups(self) -> ConsumerGroups:
        return self._running().run(self._async.consumer_groups())

    def broker_stats(self) -> BrokerStats:
        return self._running().run(self._async.broker_stats())

    def pending_transactions(self, limit: int = 200) -> PendingTransactions:
        return self._running().run(self._async.pending_transactions(limit))

    def browse(self, topic: str, queue_id: int = 0, offset: int = -1,
               max_messages: int = 32) -> BrowseResult:
        return self._running().run(self._async.browse(topic, queue_id, offset, max_messages))

    def resend(self, topic: str, queue_id: int, queue_offset: int, msg_id: str,
               group: str) -> m.SendResult:
        return self._running().run(self._async.resend(topic, queue_id, queue_offset, msg_id,
                                                      group))

    def reset_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._running().run(self._async.reset_offset(group, topic, queue_id, offset))
