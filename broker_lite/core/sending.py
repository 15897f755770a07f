"""The send path of the broker core: where a producer's message goes.

:class:`Sender` routes a message to a queue of its topic, turns it into the
record the store keeps (its tags, keys, sharding key and unique key as
properties, its born host packed), and stores it: a half through the
transaction service, a delayed message through the delay service, any other
straight into the message store. :class:`~broker_lite.core.broker.Broker`
holds one and answers ``send`` and ``send_batch`` through it; like the rest of
the core it does no network I/O and never waits for an fsync.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from broker_lite.core.ids import new_msg_id
from broker_lite.core.model import Message, SendResult, Sent
from broker_lite.core.schedule import DelayService
from broker_lite.core.topics import SYSTEM_TOPICS, TopicManager
from broker_lite.core.transactions import TransactionService
from broker_lite.errors import BrokerError, InvalidMessageError, NoPermissionError
from broker_lite.storage import MessageStore, MessageToStore
from broker_lite.storage.properties import KEYS, SHARDING_KEY, TAGS, UNIQ_KEY
from broker_lite.storage.record import pack_host

__all__ = ["Sender"]

_NO_HOST = b"\x00" * 8
#: distinct born hosts kept packed; the cache starts over past this many
_BORN_HOST_CACHE = 4096

#: a routed message: the record it becomes, its message id and its queue id
_Routed = tuple[MessageToStore, str, int]


class Sender:
    """Stores producers' messages for the broker; tells ``notify`` of each visible one."""

    def __init__(self, *, store: MessageStore, topics: TopicManager,
                 transactions: TransactionService, delays: DelayService,
                 notify: Callable[[str, int], None]) -> None:
        self._store = store
        self._topics = topics
        self._transactions = transactions
        self._delays = delays
        self._notify = notify
        #: born hosts ("ip:port" of a connection) already packed for records
        self._born_hosts: dict[str, bytes] = {}

    def _store_message(self, msg: Message, topic: str, queue_id: int, msg_id: str,
                       born_host: str) -> MessageToStore:
        props = dict(msg.properties)
        if msg.tags:
            props[TAGS] = msg.tags
        if msg.keys:
            for key in msg.keys:
                if not key or " " in key:
                    raise InvalidMessageError(f"key {key!r} is empty or has a space", field="keys")
            props[KEYS] = " ".join(msg.keys)
        if msg.sharding_key:
            props[SHARDING_KEY] = msg.sharding_key
        props[UNIQ_KEY] = msg_id
        return MessageToStore(
            topic=topic, queue_id=queue_id, body=msg.body, flag=msg.flag, properties=props,
            born_timestamp=msg.born_timestamp, born_host=self._packed_host(born_host))

    def _packed_host(self, born_host: str) -> bytes:
        """``"ip:port"`` as a record stores it; cached, since one connection sends many."""
        packed = self._born_hosts.get(born_host)
        if packed is None:
            host, _, port = born_host.rpartition(":")
            packed = pack_host(host, int(port)) if port.isdigit() else _NO_HOST
            if len(self._born_hosts) >= _BORN_HOST_CACHE:
                self._born_hosts.clear()
            self._born_hosts[born_host] = packed
        return packed

    def send(self, producer_group: str, message: Message, *, born_host: str = "",
             dedupe: bool = True) -> Sent:
        """Store a message (a half when ``message.transactional``).

        A half whose message id is already stored as a half returns the first
        one's result; ``dedupe=False`` stores it again, as RocketMQ does.
        """
        sent, visible = self._send(producer_group, message, born_host, dedupe=dedupe)
        if visible:
            self._notify(message.topic, sent.result.queue_id)
        return sent

    def _route(self, message: Message, born_host: str) -> _Routed:
        """The record a message becomes on its topic and queue, its id and queue id."""
        topic = message.topic
        if topic in SYSTEM_TOPICS:
            raise NoPermissionError(f"topic {topic!r} is reserved for the broker")
        topics = self._topics
        config = topics.ensure(topic, for_write=True)
        queue_id = topics.select_queue(config, message.queue_id, message.sharding_key)
        msg_id = message.msg_id or new_msg_id()
        return self._store_message(message, topic, queue_id, msg_id, born_host), msg_id, queue_id

    def _send(self, producer_group: str, message: Message,
              born_host: str, *, dedupe: bool = True) -> tuple[Sent, bool]:
        """Store one message; also says whether it is visible in its queue now (not a
        half, not delayed), for the caller to notify arrival listeners."""
        store_msg, msg_id, queue_id = self._route(message, born_host)
        topic = message.topic
        if message.transactional:
            # RocketMQ strips any delay from a transactional message.
            result, end = self._transactions.prepare(producer_group, store_msg, msg_id, topic,
                                                     queue_id, dedupe=dedupe)
            return Sent(result, end), False
        deliver_at_ms = message.deliver_at_ms
        if message.delay_level or (deliver_at_ms and deliver_at_ms > int(time.time() * 1000)):
            queue_offset, end = self._delays.schedule(
                store_msg, level=message.delay_level,
                deliver_at_ms=deliver_at_ms if not message.delay_level else 0)
            return Sent(SendResult(msg_id=msg_id, topic=topic, queue_id=queue_id,
                                     queue_offset=queue_offset, commit_log_offset=-1),
                        end), False
        put = self._store.put_nowait(store_msg)
        return Sent(SendResult(msg_id=msg_id, topic=topic, queue_id=queue_id,
                                 queue_offset=put.queue_offset,
                                 commit_log_offset=put.physical_offset), put.end_offset), True

    def send_batch(self, producer_group: str, messages: list[Message], *,
                   born_host: str = "") -> list[Sent | BrokerError]:
        """Store each message on its own (a refusal does not stop the others), in order.

        Runs of plain messages, and runs of halves, go to the store in one
        append each (:meth:`MessageStore.put_batch_nowait`: one lock, one
        clock read); a delayed message is stored on its own. Arrival listeners
        hear once per queue that got messages, after the batch.
        """
        results: list[Sent | BrokerError] = []
        arrived: dict[tuple[str, int], None] = {}
        run: list[_Routed] = []
        run_halves = False
        try:
            for message in messages:
                half = message.transactional
                if not half and (message.delay_level or message.deliver_at_ms):
                    self._store_run(producer_group, run, run_halves, results, arrived)
                    try:
                        sent, visible = self._send(producer_group, message, born_host)
                    except BrokerError as exc:
                        results.append(exc)
                        continue
                    results.append(sent)
                    if visible:
                        arrived[(message.topic, sent.result.queue_id)] = None
                    continue
                if half != run_halves:
                    self._store_run(producer_group, run, run_halves, results, arrived)
                    run_halves = half
                try:
                    run.append(self._route(message, born_host))
                except BrokerError as exc:  # refused before the store: answered in order
                    self._store_run(producer_group, run, run_halves, results, arrived)
                    results.append(exc)
            self._store_run(producer_group, run, run_halves, results, arrived)
        finally:
            for topic, queue_id in arrived:
                self._notify(topic, queue_id)
        return results

    def _store_run(self, producer_group: str, run: list[_Routed],
                   halves: bool, results: list[Sent | BrokerError],
                   arrived: dict[tuple[str, int], None]) -> None:
        """Store a run of routed plain messages (or halves) in one append; empty ``run``."""
        if not run:
            return
        if halves:
            for outcome in self._transactions.prepare_batch(
                    producer_group, [(msg, msg_id, msg.topic, queue_id)
                                     for msg, msg_id, queue_id in run]):
                results.append(outcome if isinstance(outcome, BrokerError)
                               else Sent(outcome[0], outcome[1]))
        else:
            puts = self._store.put_batch_nowait([msg for msg, _id, _queue in run])
            for (msg, msg_id, queue_id), put in zip(run, puts, strict=True):
                if isinstance(put, BrokerError):
                    results.append(put)
                    continue
                results.append(Sent(SendResult(msg_id, msg.topic, queue_id, put.queue_offset,
                                               put.physical_offset), put.end_offset))
                arrived[(msg.topic, queue_id)] = None
        run.clear()
