"""Pull consumers: you choose the queue and the offset, the broker keeps the group's offsets.

:class:`AsyncPullConsumer` is the asyncio one, :class:`PullConsumer` the sync
facade. The push consumer is built on the same requests.

- ``pull(topic, queue_id, offset, ...)`` reads from ``offset``; with
  ``long_poll_ms`` the broker holds the request until a message arrives or
  the time is up. An offset outside the stored range answers
  ``status == "offset_moved"`` with ``next_offset`` where to go on.
- ``ack(msg)`` marks one message consumed; acks may come out of order, the
  broker advances the group's committed offset past every gap-free run.
- ``commit(topic, queue_id, offset)`` sets the committed offset outright.
- ``send_back(msg)`` reports a failed message: the broker redelivers it on
  ``%RETRY%group`` after the next delay of the schedule, or moves it to
  ``%DLQ%group`` after ``max_reconsume_times``; the original counts as consumed.
- ``assignment(topic)`` asks which queues this client should read now (the
  broker shares a topic's queues evenly among the group's live members).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Unpack

from broker_lite.client.config import ConnectionOptions, build_config, check_group
from broker_lite.client.message import ReceivedMessage
from broker_lite.client.session import Session, SessionClient
from broker_lite.client.sync_client import GroupSyncClient
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m

__all__ = ["AsyncPullConsumer", "PullConsumer", "PullResult"]

FOUND = "found"
NO_NEW_MESSAGE = "no_new_message"
OFFSET_MOVED = "offset_moved"


@dataclass(frozen=True, slots=True)
class PullResult:
    """``status`` is ``"found"``, ``"no_new_message"`` or ``"offset_moved"``."""

    status: str
    messages: list[ReceivedMessage]
    next_offset: int
    min_offset: int
    max_offset: int

    @classmethod
    def from_wire(cls, response: m.PullResponse) -> PullResult:
        return cls(status=response.status,
                   messages=[ReceivedMessage.from_wire(d) for d in response.messages],
                   next_offset=response.next_offset, min_offset=response.min_offset,
                   max_offset=response.max_offset)


class AsyncPullConsumer(SessionClient):
    """Consumer group ``group``'s requests, on asyncio."""

    def __init__(self, group: str, server: str | None = None, *, max_reconsume_times: int = 16,
                 **options: Unpack[ConnectionOptions]) -> None:
        self.group = check_group(group)
        self.config = build_config(server, **options)
        self.max_reconsume_times = max_reconsume_times
        self.session = Session(self.config)


    async def subscribe(self, topic: str, tag_expr: str = "*", *,
                        broadcasting: bool = False) -> None:
        """Register as a member of the group for ``topic`` (counts in assignments)."""
        self.session.add_subscription(m.ConsumerSubscription(
            group=self.group, topic=topic, tag_expr=tag_expr, broadcasting=broadcasting))
        if self.session.connected:
            await self.session.heartbeat()

    async def assignment(self, topic: str) -> list[int]:
        """The queue ids of ``topic`` this client should read now."""
        assignment = await self.session.request(
            RequestCode.QUERY_ASSIGNMENT,
            m.QueryAssignmentRequest(client_id=self.client_id, group=self.group, topic=topic),
            m.Assignment)
        return list(assignment.queue_ids)

    async def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
                   long_poll_ms: int = 0, tag_expr: str = "*") -> PullResult:
        request = m.PullRequest(group=self.group, topic=topic, queue_id=queue_id, offset=offset,
                                max_messages=max_messages, tag_expr=tag_expr,
                                long_poll_ms=max(0, long_poll_ms))
        response = await self.session.request(
            RequestCode.PULL_MESSAGE, request, m.PullResponse,
            timeout=self.config.request_timeout + max(0, long_poll_ms) / 1000)
        return PullResult.from_wire(response)

    async def committed_offset(self, topic: str, queue_id: int) -> int:
        """The group's committed offset on the queue; -1 if it never committed there."""
        response = await self.session.request(
            RequestCode.QUERY_CONSUMER_OFFSET,
            m.OffsetRequest(group=self.group, topic=topic, queue_id=queue_id), m.OffsetResponse)
        return response.offset

    async def commit(self, topic: str, queue_id: int, offset: int) -> None:
        """Set the committed offset: the next message the group will read there."""
        await self.session.request(
            RequestCode.UPDATE_CONSUMER_OFFSET,
            m.UpdateOffsetRequest(group=self.group, topic=topic, queue_id=queue_id,
                                  offset=offset), m.Empty)

    async def ack(self, message: ReceivedMessage) -> None:
        await self.session.request(
            RequestCode.ACK_MESSAGE,
            m.AckRequest(group=self.group, topic=message.delivered_topic,
                         queue_id=message.queue_id, queue_offset=message.queue_offset,
                         msg_id=message.msg_id), m.Empty)

    async def send_back(self, message: ReceivedMessage, *, delay_level: int = 0,
                        max_reconsume_times: int | None = None) -> None:
        """Consume failed: redeliver later (``delay_level`` 0: the schedule's next),
        or straight to the DLQ with ``delay_level=-1``."""
        limit = self.max_reconsume_times if max_reconsume_times is None else max_reconsume_times
        await self.session.request(
            RequestCode.CONSUMER_SEND_BACK,
            m.SendBackRequest(group=self.group, topic=message.delivered_topic,
                              queue_id=message.queue_id, queue_offset=message.queue_offset,
                              msg_id=message.msg_id, delay_level=delay_level,
                              max_reconsume_times=limit), m.Empty)

    async def topic_route(self, topic: str) -> m.TopicInfo:
        """The topic's queue count, permission and each queue's max offset."""
        return await self.session.request(RequestCode.TOPIC_ROUTE,
                                          m.TopicRouteRequest(topic=topic), m.TopicInfo)


class PullConsumer(GroupSyncClient[AsyncPullConsumer]):
    """The sync pull consumer: an :class:`AsyncPullConsumer` on a background loop."""

    def __init__(self, group: str, server: str | None = None, *, max_reconsume_times: int = 16,
                 **options: Unpack[ConnectionOptions]) -> None:
        self._async = AsyncPullConsumer(group, server, max_reconsume_times=max_reconsume_times,
                                        **options)
        self._loop = None

    _kind = "consumer"
    _loop_prefix = "broker-lite-pull"

    def subscribe(self, topic: str, tag_expr: str = "*", *, broadcasting: bool = False) -> None:
        self._running().run(self._async.subscribe(topic, tag_expr, broadcasting=broadcasting))

    def assignment(self, topic: str) -> list[int]:
        return self._running().run(self._async.assignment(topic))

    def pull(self, topic: str, queue_id: int, offset: int, max_messages: int = 32, *,
             long_poll_ms: int = 0, tag_expr: str = "*") -> PullResult:
        return self._running().run(self._async.pull(
            topic, queue_id, offset, max_messages, long_poll_ms=long_poll_ms, tag_expr=tag_expr))

    def committed_offset(self, topic: str, queue_id: int) -> int:
        return self._running().run(self._async.committed_offset(topic, queue_id))

    def commit(self, topic: str, queue_id: int, offset: int) -> None:
        self._running().run(self._async.commit(topic, queue_id, offset))

    def ack(self, messages: ReceivedMessage | Iterable[ReceivedMessage]) -> None:
        """Ack one message or several."""
        batch = [messages] if isinstance(messages, ReceivedMessage) else list(messages)
        if batch:
            self._running().run(self._ack_each(batch))  # one hop to the loop, not one each

    async def _ack_each(self, batch: list[ReceivedMessage]) -> None:
        for message in batch:
            await self._async.ack(message)

    def send_back(self, message: ReceivedMessage, *, delay_level: int = 0) -> None:
        self._running().run(self._async.send_back(message, delay_level=delay_level))

    def topic_route(self, topic: str) -> m.TopicInfo:
        return self._running().run(self._async.topic_route(topic))
