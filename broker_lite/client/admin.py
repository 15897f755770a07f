"""Admin requests: create and list topics, a topic's route, messages by key."""

from __future__ import annotations

from broker_lite.client.config import ClientConfig, build_config
from broker_lite.client.message import ReceivedMessage
from broker_lite.client.session import Session, SessionClient
from broker_lite.client.sync_client import SyncClient
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m

__all__ = ["Admin", "AsyncAdmin", "TopicInfo"]

#: a topic's name, queue count, permission (4 read, 2 write) and each queue's max offset
TopicInfo = m.TopicInfo


class AsyncAdmin(SessionClient):
    def __init__(self, server: str | None = None, *, access_key: str | None = None,
                 secret_key: str | None = None, timeout: float | None = None,
                 config: ClientConfig | None = None) -> None:
        self.config = build_config(server, access_key=access_key, secret_key=secret_key,
                                   timeout=timeout, config=config)
        self.session = Session(self.config)

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> TopicInfo:
        """Create ``topic`` (or grow its queues / change its permission)."""
        return await self.session.request(
            RequestCode.TOPIC_CREATE, m.TopicCreateRequest(topic=topic, queues=queues, perm=perm),
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


class Admin(SyncClient):
    """The sync admin client."""

    _kind = "admin client"
    _async: AsyncAdmin

    def __init__(self, server: str | None = None, *, access_key: str | None = None,
                 secret_key: str | None = None, timeout: float | None = None,
                 config: ClientConfig | None = None) -> None:
        self._async = AsyncAdmin(server, access_key=access_key, secret_key=secret_key,
                                 timeout=timeout, config=config)
        self._loop = None

    def _loop_name(self) -> str:
        return "broker-lite-admin"

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> TopicInfo:
        return self._running().run(self._async.create_topic(topic, queues, perm))

    def list_topics(self) -> list[TopicInfo]:
        return self._running().run(self._async.list_topics())

    def topic_route(self, topic: str) -> TopicInfo:
        return self._running().run(self._async.topic_route(topic))

    def query_by_key(self, key: str, max_messages: int = 32) -> list[ReceivedMessage]:
        return self._running().run(self._async.query_by_key(key, max_messages))
