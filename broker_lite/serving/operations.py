"""What operators ask a broker: consumer groups and lag, store size, pending halves,
a queue's messages without a consumer group, and resending one message to a group.

These are the operations console's requests (``rocketbox console``). Each is a
plain function of a :class:`~broker_lite.core.Broker`: no network I/O, quick,
thread-safe like the broker's own methods. Only :func:`resend` writes.

The summaries only operators ask for (groups, stats, pending halves, a
resend's result) are the native protocol's structs; what the core already has
a value for stays the core's: :func:`browse` returns a
:class:`~broker_lite.core.model.PullResult`, which the door writes as it does a
pull's.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from broker_lite.core.broker import Broker
from broker_lite.core.model import FOUND, NO_NEW_MESSAGE, PullResult, Subscription
from broker_lite.core.topics import RETRY_PREFIX
from broker_lite.core.transactions import delivered_view
from broker_lite.errors import MessageNotFoundError, RequestError
from broker_lite.protocol import messages as m
from broker_lite.protocol import ops_messages as ops
from broker_lite.storage import MessageToStore
from broker_lite.storage.properties import UNIQ_KEY

__all__ = ["broker_stats", "browse", "consumer_groups", "pending_transactions", "resend"]

log = logging.getLogger("broker_lite.core.operations")

#: most messages one browse returns
MAX_BROWSE = 256


def consumer_groups(broker: Broker) -> ops.ConsumerGroupsResponse:
    """Every group's committed offset per queue, and the connected clients.

    A group that subscribed but never committed shows ``committed=-1`` on each
    queue of its topics, so its lag is the whole queue.
    """
    committed = broker.offsets.all()
    clients = [ops.ClientInfo(client_id=cid, remote_address=address, producer_groups=groups,
                            subscriptions=[_subscription(sub) for sub in subs])
               for cid, address, groups, subs in broker.clients.snapshot()]
    for client in clients:
        for sub in client.subscriptions:
            config = broker.topics.get(sub.topic)
            for queue_id in range(config.queues if config is not None else 0):
                committed.setdefault((sub.group, sub.topic, queue_id), -1)
    offsets: list[ops.GroupOffset] = []
    for (group, topic, queue_id), offset in sorted(committed.items()):
        low, high = broker.store.queue_offsets(topic, queue_id)
        offsets.append(ops.GroupOffset(group=group, topic=topic, queue_id=queue_id,
                                     committed=offset, min_offset=low, max_offset=high))
    return ops.ConsumerGroupsResponse(offsets=offsets, clients=clients)


def _subscription(sub: Subscription) -> m.ConsumerSubscription:
    return m.ConsumerSubscription(group=sub.group, topic=sub.topic, tag_expr=sub.tag_expr,
                                  broadcasting=sub.broadcasting)


def _disk_bytes(root: Path) -> int:
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                continue  # deleted by retention meanwhile
    return total


def broker_stats(broker: Broker) -> ops.BrokerStats:
    """The commit log's bounds, the data directory's size on disk, pending halves."""
    return ops.BrokerStats(
        broker_name=broker.config.broker_name, min_offset=broker.store.min_offset,
        max_offset=broker.store.max_offset,
        disk_bytes=_disk_bytes(Path(broker.config.store.data_dir)),
        pending_transactions=broker.transactions.pending_count,
        server_time_ms=int(time.time() * 1000))


def pending_transactions(broker: Broker, limit: int) -> ops.TransactionListResponse:
    """Up to ``limit`` halves awaiting resolution, oldest first, with their check schedule."""
    service = broker.transactions
    halves = [ops.HalfInfo(transaction_id=e.transaction_id, producer_group=e.producer_group,
                         real_topic=e.real_topic, half_offset=e.half_offset,
                         store_timestamp=e.store_ts, check_times=e.check_times,
                         last_check_ms=e.last_check_ms, next_check_ms=service.next_check_ms(e))
              for e in service.pending(max(0, min(limit, 10_000)))]
    return ops.TransactionListResponse(halves=halves, pending=service.pending_count)


def browse(broker: Broker, request: ops.BrowseRequest) -> PullResult:
    """Messages of one queue from ``offset`` on; no group, nothing acked.

    An offset below the queue's first one starts at the first one; ``-1`` reads
    the newest ``max_messages``.
    """
    config = broker.topics.get(request.topic)
    if config is None:
        return PullResult(status=NO_NEW_MESSAGE, messages=[], next_offset=0, min_offset=0,
                          max_offset=0)
    if not 0 <= request.queue_id < config.queues:
        raise RequestError(f"queue {request.queue_id} does not exist in {request.topic!r} "
                           f"(queues 0..{config.queues - 1})")
    wanted = max(1, min(request.max_messages, MAX_BROWSE))
    low, high = broker.store.queue_offsets(request.topic, request.queue_id)
    offset = max(high - wanted, low) if request.offset < 0 else max(request.offset, low)
    records, next_offset = broker.store.read_queue(request.topic, request.queue_id, offset,
                                                   wanted)
    return PullResult(status=FOUND if records else NO_NEW_MESSAGE,
                      messages=[delivered_view(r) for r in records],
                      next_offset=next_offset, min_offset=low, max_offset=high)


def resend(broker: Broker, request: ops.ResendRequest) -> tuple[m.SendResult, int]:
    """Store the message at ``topic/queue/offset`` again on ``%RETRY%group``, due now.

    This is how a dead letter goes back to its group: the group's consumers
    subscribe to their retry topic and see the message under its original
    topic. Its redelivery count starts over. Returns the result and the end
    offset to make durable.
    """
    if not request.group:
        raise RequestError("resend: group is empty")
    units = broker.store.queue_units(request.topic, request.queue_id, request.queue_offset, 1)
    record = None
    if units and units[0].queue_offset == request.queue_offset:
        record = broker.store.get(units[0].commitlog_offset)
    if record is None or record.properties.get(UNIQ_KEY) != request.msg_id:
        raise MessageNotFoundError(f"no message {request.msg_id!r} at {request.topic}/"
                                   f"{request.queue_id} queue offset {request.queue_offset}")
    retry = RETRY_PREFIX + request.group
    broker.topics.ensure(retry, for_write=True)
    put = broker.store.put_nowait(MessageToStore(
        topic=retry, queue_id=0, body=record.body, flag=record.flag,
        properties=dict(record.properties), born_timestamp=record.born_timestamp,
        born_host=record.born_host, reconsume_times=0))
    broker.notify_arrival(retry, 0)
    log.info("message %s resent from %s to %s", request.msg_id, request.topic, retry)
    return m.SendResult(msg_id=request.msg_id, topic=retry, queue_id=0,
                        queue_offset=put.queue_offset,
                        commit_log_offset=put.physical_offset), put.end_offset
