"""The broker core: one object both doors (native and gRPC) call.

It owns the message store and the services above it (topics, consumer
offsets, clients, delays and retries, transactions). It does no network I/O:
the servers call its methods, schedule its periodic work
(:meth:`deliver_due`, :meth:`check_transactions`, :meth:`expire_clients`,
:meth:`persist`), and wait for durability with ``store.when_flushed`` in
``sync`` mode before they acknowledge.

Every method is thread-safe and returns quickly: none waits for an fsync.
Requests and answers are the core's own values (:mod:`broker_lite.core.model`);
each door translates its wire format to them at its edge. The send path
(routing a message to a queue, making it a record, storing it) is
:class:`~broker_lite.core.sending.Sender`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from broker_lite.core.acl import group_of_system_topic
from broker_lite.core.clients import Channel, ClientRegistry, allocate_averagely
from broker_lite.core.config import BrokerConfig
from broker_lite.core.filtering import parse_tag_expr
from broker_lite.core.log_safe import printable
from broker_lite.core.model import (
    FOUND,
    NO_NEW_MESSAGE,
    OFFSET_MOVED,
    Ack,
    Assignment,
    AssignmentQuery,
    ClientRegistration,
    DeliveredMessage,
    Ended,
    EndRequest,
    KeyQuery,
    Message,
    NewTopic,
    OffsetQuery,
    OffsetUpdate,
    PullQuery,
    PullResult,
    SendBack,
    Sent,
    TopicInfo,
)
from broker_lite.core.offsets import OffsetManager
from broker_lite.core.schedule import DelayService
from broker_lite.core.sending import Sender
from broker_lite.core.topics import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    SYSTEM_TOPIC_QUEUES,
    SYSTEM_TOPICS,
    TopicConfig,
    TopicManager,
)
from broker_lite.core.transactions import TransactionService, delivered_view
from broker_lite.errors import (
    BrokerError,
    MessageNotFoundError,
    NoPermissionError,
    RequestError,
    TopicNotFoundError,
)
from broker_lite.storage import MessageStore, MessageToStore, StoredRecord
from broker_lite.storage.properties import (
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
    UNIQ_KEY,
)

__all__ = ["Broker"]

log = logging.getLogger("broker_lite.core")


#: builds the broker's transaction service: :class:`TransactionService` itself, or a
#: subclass of it (a test's fault, injected by construction)
TransactionFactory = Callable[[MessageStore, BrokerConfig, ClientRegistry,
                               Callable[[str, int], None]], TransactionService]


class Broker:
    def __init__(self, config: BrokerConfig, *,
                 transactions: TransactionFactory = TransactionService) -> None:
        self.config = config
        root = Path(config.store.data_dir)
        self.store = MessageStore(config.store)
        self._listeners: list[Callable[[str, int], None]] = []
        self._listeners_lock = threading.Lock()
        self.topics = TopicManager(root / "topics.json", auto_create=config.auto_create_topics,
                                   default_queues=config.default_queues)
        for name, queues in SYSTEM_TOPIC_QUEUES.items():
            if self.topics.get(name) is None:
                self.topics.create(name, queues, system=True)
        self._adopt_stored_topics()
        self.offsets = OffsetManager(root / "offsets.json")
        self.clients = ClientRegistry(config.client_expiry)
        self.delays = DelayService(self.store, root / "delay_offsets.json",
                                   time_scale=config.delay_time_scale, notify=self._arrived)
        self.transactions = transactions(self.store, config, self.clients, self._arrived)
        self._sender = Sender(store=self.store, topics=self.topics,
                              transactions=self.transactions, delays=self.delays,
                              notify=self._arrived)
        log.info("broker %s open on %s: log %d..%d, %d pending transactions",
                 config.broker_name, root, self.store.min_offset, self.store.max_offset,
                 self.transactions.pending_count)

    def _adopt_stored_topics(self) -> None:
        """Topics that have queues on disk but no entry (auto-created, then a crash)."""
        seen: dict[str, int] = {}
        for topic, queue_id in self.store.queues():
            seen[topic] = max(seen.get(topic, 0), queue_id + 1)
        for topic, queues in seen.items():
            if self.topics.get(topic) is None:
                internal = topic in SYSTEM_TOPICS or topic.startswith((RETRY_PREFIX, DLQ_PREFIX))
                least = 1 if internal else self.config.default_queues
                self.topics.create(topic, max(queues, least), system=True)

    # -- notifications -----------------------------------------------------------

    def add_arrival_listener(self, listener: Callable[[str, int], None]) -> None:
        with self._listeners_lock:
            self._listeners.append(listener)

    def notify_arrival(self, topic: str, queue_id: int) -> None:
        """Tell the arrival listeners (long polls) that ``topic/queue_id`` got a message."""
        self._arrived(topic, queue_id)

    def _arrived(self, topic: str, queue_id: int) -> None:
        for listener in list(self._listeners):
            try:
                listener(topic, queue_id)
            except Exception:
                log.exception("arrival listener failed")

    # -- producing ---------------------------------------------------------------

    def send(self, producer_group: str, message: Message, *, born_host: str = "",
             dedupe: bool = True) -> Sent:
        """Store a message (a half when ``message.transactional``); see
        :meth:`~broker_lite.core.sending.Sender.send`."""
        return self._sender.send(producer_group, message, born_host=born_host, dedupe=dedupe)

    def send_batch(self, producer_group: str, messages: list[Message], *,
                   born_host: str = "") -> list[Sent | BrokerError]:
        """Store each message on its own, in order; see
        :meth:`~broker_lite.core.sending.Sender.send_batch`."""
        return self._sender.send_batch(producer_group, messages, born_host=born_host)

    def transaction_topic(self, transaction_id: str, commit_log_offset: int = -1) -> str | None:
        """The real topic of the half an end names; ``None`` when there is no such half."""
        return self.transactions.real_topic(transaction_id, commit_log_offset)

    def end_transaction(self, request: EndRequest) -> Ended:
        response, end = self.transactions.end(request)
        return Ended(response, end)

    def end_transactions(self, requests: list[EndRequest]) -> list[Ended | BrokerError]:
        """End many transactions, each answered on its own as :meth:`end_transaction`
        would, with the batch's records written in two appends (see
        :meth:`TransactionService.end_batch`)."""
        return [outcome if isinstance(outcome, BrokerError) else Ended(outcome[0], outcome[1])
                for outcome in self.transactions.end_batch(requests)]

    # -- consuming -----------------------------------------------------------------

    def _read_topic(self, topic: str) -> TopicConfig | None:
        config = self.topics.get(topic)
        if config is not None and not config.readable:
            raise NoPermissionError(f"topic {topic!r} is not readable (perm {config.perm})")
        return config

    def _check_queue(self, topic: str, queue_id: int) -> None:
        config = self.topics.get(topic)
        limit = config.queues if config is not None else self.config.default_queues
        if not 0 <= queue_id < max(limit, 1):
            raise RequestError(f"queue {queue_id} does not exist in {topic!r} "
                               f"(queues 0..{limit - 1})")

    def pull(self, query: PullQuery) -> PullResult:
        self._read_topic(query.topic)
        self._check_queue(query.topic, query.queue_id)
        tag_filter = parse_tag_expr(query.tag_expr)
        low, high = self.store.queue_offsets(query.topic, query.queue_id)
        offset = query.offset
        if offset < low or offset > high:
            moved = low if offset < low else high
            return PullResult(status=OFFSET_MOVED, messages=[], next_offset=moved,
                              min_offset=low, max_offset=high)
        wanted = max(1, min(query.max_messages, 1024))
        found: list[DeliveredMessage] = []
        while offset < high and not found:
            records, offset = self.store.read_queue(
                query.topic, query.queue_id, offset, wanted, tag_filter.hashes)
            found.extend(delivered_view(r) for r in records if tag_filter.matches(r.tags))
        status = FOUND if found or offset > query.offset else NO_NEW_MESSAGE
        return PullResult(status=status, messages=found, next_offset=offset,
                          min_offset=low, max_offset=high)

    def has_new(self, topic: str, queue_id: int, offset: int) -> bool:
        return offset < self.store.queue_offsets(topic, queue_id)[1]

    def query_assignment(self, query: AssignmentQuery) -> Assignment:
        topic = query.topic
        config = self.topics.get(topic)
        if config is None:
            # Subscribing does not create a topic (a typo would): no queues until a
            # producer creates it; consumers ask again at their next rebalance.
            return Assignment(topic=topic, queue_ids=[])
        queues = list(range(config.queues))
        members, broadcasting = self.clients.members(query.group, topic)
        if broadcasting:
            return Assignment(topic=topic, queue_ids=queues, broadcasting=True)
        if query.client_id not in members:
            members = sorted([*members, query.client_id])
        return Assignment(topic=topic, queue_ids=allocate_averagely(queues, members,
                                                                    query.client_id))

    def query_offset(self, query: OffsetQuery) -> int:
        """The group's committed offset on the queue; -1 when it never committed there."""
        return self.offsets.committed(query.group, query.topic, query.queue_id)

    def update_offset(self, update: OffsetUpdate) -> None:
        self._check_queue(update.topic, update.queue_id)
        low, high = self.store.queue_offsets(update.topic, update.queue_id)
        self.offsets.update(update.group, update.topic, update.queue_id,
                            min(max(update.offset, low), high))

    def _message_at(self, topic: str, queue_id: int, queue_offset: int,
                    msg_id: str) -> StoredRecord:
        units = self.store.queue_units(topic, queue_id, queue_offset, 1)
        if units and units[0].queue_offset == queue_offset:
            record = self.store.get(units[0].commitlog_offset)
            if record.properties.get(UNIQ_KEY) == msg_id:
                return record
        raise MessageNotFoundError(
            f"no message {msg_id!r} at {topic}/{queue_id} queue offset {queue_offset}")

    def ack(self, request: Ack) -> None:
        self._message_at(request.topic, request.queue_id, request.queue_offset, request.msg_id)
        low = self.store.queue_offsets(request.topic, request.queue_id)[0]
        self.offsets.ack(request.group, request.topic, request.queue_id, request.queue_offset, low)

    def mark_filtered(self, group: str, topic: str, queue_id: int,
                      queue_offsets: Iterable[int]) -> None:
        """Count queue units a pull skipped (their tag did not match) as consumed by ``group``.

        A filtered unit carries no message id, so :meth:`ack` cannot name it;
        without this the group's committed offset would stop below it.
        """
        low = self.store.queue_offsets(topic, queue_id)[0]
        for offset in queue_offsets:
            self.offsets.ack(group, topic, queue_id, offset, low)

    def send_back(self, request: SendBack) -> int:
        """A failed delivery: schedule it on ``%RETRY%group``, or dead-letter it."""
        record = self._message_at(request.topic, request.queue_id, request.queue_offset,
                                  request.msg_id)
        props = dict(record.properties)
        if group_of_system_topic(request.topic) is None:  # never the sender's say
            props[RETRY_TOPIC] = request.topic
        else:
            props.setdefault(RETRY_TOPIC, request.topic)
        props.setdefault(ORIGIN_MESSAGE_ID, request.msg_id)
        reconsume = record.reconsume_times + 1
        limit = min(request.max_reconsume_times, self.config.max_reconsume_times)
        if request.delay_level < 0 or record.reconsume_times >= limit:
            dlq = DLQ_PREFIX + request.group
            self.topics.ensure(dlq, for_write=True)
            put = self.store.put_nowait(MessageToStore(
                topic=dlq, queue_id=0, body=record.body, flag=record.flag, properties=props,
                born_timestamp=record.born_timestamp, born_host=record.born_host,
                reconsume_times=reconsume))
            self._arrived(dlq, 0)
            end = put.end_offset
            log.info("message %s moved to %s after %d deliveries", printable(request.msg_id),
                     printable(dlq), reconsume)
        else:
            retry = RETRY_PREFIX + request.group
            self.topics.ensure(retry, for_write=True)
            level = request.delay_level or min(3 + record.reconsume_times, 18)
            _q, end = self.delays.schedule(MessageToStore(
                topic=retry, queue_id=0, body=record.body, flag=record.flag, properties=props,
                born_timestamp=record.born_timestamp, born_host=record.born_host,
                reconsume_times=reconsume), level=level, deliver_at_ms=0)
        low = self.store.queue_offsets(request.topic, request.queue_id)[0]
        self.offsets.ack(request.group, request.topic, request.queue_id, request.queue_offset, low)
        return end

    # -- clients -------------------------------------------------------------------

    def register(self, registration: ClientRegistration, channel: Channel) -> None:
        """A heartbeat. As in RocketMQ, a consumer group's retry topic exists from here on."""
        for group in {sub.group for sub in registration.subscriptions}:
            if self.topics.get(RETRY_PREFIX + group) is None:
                self.topics.ensure(RETRY_PREFIX + group, for_write=True)
        self.clients.register(registration, channel)

    def unregister(self, client_id: str, channel: Channel | None = None) -> None:
        """Forget a client; given its ``channel``, only the registration that channel made."""
        self.clients.unregister(client_id, channel)

    def channel_closed(self, channel: Channel) -> None:
        self.clients.channel_closed(channel)

    def expire_clients(self) -> None:
        for client_id in self.clients.expire():
            log.info("client %s expired (no heartbeat)", client_id)

    # -- admin -----------------------------------------------------------------------

    def _info(self, config: TopicConfig) -> TopicInfo:
        return TopicInfo(topic=config.name, queues=config.queues, perm=config.perm,
                         max_offsets=[self.store.queue_offsets(config.name, q)[1]
                                      for q in range(config.queues)],
                         attributes=dict(config.attributes))

    def create_topic(self, request: NewTopic) -> TopicInfo:
        return self._info(self.topics.create(
            request.topic, request.queues, request.perm, attributes=request.attributes,
            removed=tuple(request.removed_attributes)))

    def list_topics(self) -> list[TopicInfo]:
        return [self._info(t) for t in self.topics.all()]

    def topic_route(self, topic: str) -> TopicInfo:
        config = self.topics.get(topic)
        if config is None:
            raise TopicNotFoundError(topic)
        return self._info(config)

    def query_by_key(self, query: KeyQuery) -> list[DeliveredMessage]:
        """Stored messages carrying ``query.key`` (unique key, transaction id or a user
        key), newest first."""
        records = self.store.lookup_key(query.key, max(1, min(query.max_messages, 256)))
        return [delivered_view(r) for r in records]

    # -- periodic work -------------------------------------------------------------------

    def deliver_due(self) -> int:
        return self.delays.deliver_due()

    def check_transactions(self) -> int:
        return self.transactions.check()

    def persist(self) -> None:
        self.topics.persist()
        self.offsets.persist()
        self.delays.persist()

    def close(self) -> None:
        self.persist()
        self.store.close()
