"""The broker as the console shows it: topics, consumer groups with lag, dead letters.

One :class:`~broker_lite.client.Admin` connection serves every page; the
numbers are shaped here (lag per queue, retry and DLQ sizes per group) so the
templates only draw them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker_lite.client import Admin, ReceivedMessage
from broker_lite.client.admin import ClientInfo, StoredMessage
from broker_lite.client.admin import names as n

__all__ = ["GroupView", "QueueLag", "browse_rows", "dead_letter_groups", "group_views",
           "is_internal", "message_row"]


def is_internal(topic: str) -> bool:
    """The broker's own topics, retry and dead-letter topics."""
    return topic in n.SYSTEM_TOPICS or topic.startswith((n.RETRY_PREFIX, n.DLQ_PREFIX,
                                                          n.SYSTEM_TOPIC_PREFIX))


@dataclass(frozen=True, slots=True)
class QueueLag:
    topic: str
    queue_id: int
    committed: int
    max_offset: int
    min_offset: int

    @property
    def lag(self) -> int:
        start = self.committed if self.committed >= 0 else self.min_offset
        return max(0, self.max_offset - start)


@dataclass(slots=True)
class GroupView:
    """One consumer group: its queues' lag, its clients, its retry and DLQ sizes."""

    group: str
    queues: list[QueueLag] = field(default_factory=list)
    clients: list[ClientInfo] = field(default_factory=list)
    retry_waiting: int = 0
    dlq_size: int = 0

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues if not q.topic.startswith(n.RETRY_PREFIX))


def group_views(admin: Admin) -> list[GroupView]:
    """Every group the broker knows (by offsets or live subscriptions), sorted by name."""
    groups = admin.consumer_groups()
    sizes = {t.topic: t for t in admin.list_topics()}
    views: dict[str, GroupView] = {}
    for off in groups.offsets:
        view = views.setdefault(off.group, GroupView(off.group))
        lag = QueueLag(off.topic, off.queue_id, off.committed, off.max_offset, off.min_offset)
        if off.topic == n.RETRY_PREFIX + off.group:
            view.retry_waiting += lag.lag
        else:
            view.queues.append(lag)
    for client in groups.clients:
        for group in sorted({s.group for s in client.subscriptions}):
            views.setdefault(group, GroupView(group)).clients.append(client)
    for name, view in views.items():
        dlq = sizes.get(n.DLQ_PREFIX + name)
        if dlq is not None:
            view.dlq_size = sum(dlq.max_offsets)
    return [views[name] for name in sorted(views)]


def dead_letter_groups(admin: Admin) -> list[tuple[str, int]]:
    """``(group, messages ever dead-lettered)`` for each ``%DLQ%group`` topic."""
    return [(t.topic[len(n.DLQ_PREFIX):], sum(t.max_offsets)) for t in admin.list_topics()
            if t.topic.startswith(n.DLQ_PREFIX)]


def message_row(msg: StoredMessage | ReceivedMessage) -> dict[str, Any]:
    """A stored message (as browsed, or as a key lookup returns it) flattened for a table."""
    props = msg.properties
    topic = msg.delivered_topic if isinstance(msg, ReceivedMessage) else msg.topic
    return {"msg_id": msg.msg_id or props.get(n.UNIQ_KEY, ""), "topic": topic,
            "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
            "origin_topic": props.get(n.RETRY_TOPIC, ""),
            "origin_msg_id": props.get(n.ORIGIN_MESSAGE_ID, ""),
            "tx_id": props.get(n.TRANSACTION_ID) or msg.msg_id,
            "tags": msg.tags or "", "keys": " ".join(msg.keys),
            "store_ms": msg.store_timestamp, "born_ms": msg.born_timestamp,
            "reconsume_times": msg.reconsume_times,
            "checks": props.get(n.TRANSACTION_CHECK_TIMES, ""),
            "body": msg.body.decode("utf-8", errors="replace")[:200]}


def browse_rows(admin: Admin, topic: str, limit: int = 50) -> list[dict[str, Any]]:
    """The newest ``limit`` messages of ``topic`` queue 0, newest first."""
    response = admin.browse(topic, 0, -1, limit)
    return [message_row(msg) for msg in reversed(response.messages)]


