"""Push consumers: subscribe, register a listener, and messages arrive.

:class:`AsyncPushConsumer` runs on asyncio; :class:`PushConsumer` is the sync
facade (its own event loop in a background thread). Both:

- register the group's subscriptions with the broker (heartbeats), and in
  clustering mode also ``%RETRY%{group}``, where failed messages come back;
  a retried message shows its original topic (``RETRY_TOPIC``);
- ask ``QUERY_ASSIGNMENT`` every ``rebalance_interval`` seconds (and right
  after a reconnect), and run one :class:`QueueWorker` per assigned queue;
- start a queue at the group's committed offset; a group that never
  committed there starts at the queue's first stored message
  (``consume_from=ConsumeFrom.FIRST_OFFSET``, the default) or at its end
  (``LAST_OFFSET``);
- call the listener (see :mod:`broker_lite.client.listener`) concurrently on
  ``consume_threads`` threads, or one message at a time per queue with
  ``orderly=True``; then ack, or send back for a retry.

Delivery is at least once: a rebalance or a crash may deliver a message
again, to this member or another. ``ReceivedMessage.dedupe_key`` is the key
to make handling idempotent. Orderly mode keeps per-queue order within one
member; the broker does not lock queues, so during a rebalance two members
may briefly hold the same queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
from typing import Unpack

from broker_lite.client.async_client import AsyncClient
from broker_lite.client.config import ClientConfig, ConnectionOptions
from broker_lite.client.errors import ClientClosedError
from broker_lite.client.listener import (
    ConsumeFrom,
    ConsumeResult,
    MessageListener,
    call_listener,
)
from broker_lite.client.loop_thread import LoopThread
from broker_lite.client.message import RETRY_PREFIX, ReceivedMessage, retry_topic
from broker_lite.client.pull_consumer import AsyncPullConsumer
from broker_lite.client.queue_worker import QueueWorker, WorkerOptions
from broker_lite.client.sync_client import GroupSyncClient
from broker_lite.errors import BrokerError, ConfigurationError
from broker_lite.protocol import messages as m

__all__ = ["AsyncPushConsumer", "PushConsumer", "PushConsumerOptions"]

log = logging.getLogger("broker_lite.client.consumer")


class AsyncPushConsumer(AsyncClient):
    """A push consumer of group ``group`` on asyncio (see the module docstring)."""

    def __init__(
        self,
        group: str,
        server: str | None = None,
        *,
        listener: MessageListener | None = None,
        tag_expr: str = "*",
        consume_threads: int = 20,
        broadcasting: bool = False,
        orderly: bool = False,
        max_reconsume_times: int = 16,
        consume_batch_size: int = 1,
        pull_batch_size: int = 32,
        long_poll_ms: int = 15_000,
        rebalance_interval: float = 5.0,
        consume_from: ConsumeFrom = ConsumeFrom.FIRST_OFFSET,
        max_inflight_per_queue: int = 256,
        suspend_seconds: float = 1.0,
        shutdown_timeout: float = 10.0,
        **options: Unpack[ConnectionOptions],
    ) -> None:
        if consume_threads < 1:
            raise ConfigurationError(f"consume_threads must be >= 1, got {consume_threads}",
                                     setting="consume_threads")
        if not 0 <= max_reconsume_times <= 16:
            raise ConfigurationError(
                f"max_reconsume_times must be in [0, 16], got {max_reconsume_times}",
                setting="max_reconsume_times")
        if consume_batch_size < 1 or pull_batch_size < 1 or max_inflight_per_queue < 1:
            raise ConfigurationError(
                "consume_batch_size, pull_batch_size and max_inflight_per_queue "
                "must be >= 1",
                setting="consume_batch_size, pull_batch_size, max_inflight_per_queue")
        if rebalance_interval <= 0 or long_poll_ms < 0:
            raise ConfigurationError("rebalance_interval must be > 0 and long_poll_ms >= 0",
                                     setting="rebalance_interval, long_poll_ms")
        self.client = AsyncPullConsumer(group, server, max_reconsume_times=max_reconsume_times,
                                        **options)
        self.group = self.client.group
        self.listener = listener
        self.default_tag_expr = tag_expr
        self.consume_threads = consume_threads
        self.broadcasting = broadcasting
        self.rebalance_interval = rebalance_interval
        self.shutdown_timeout = shutdown_timeout
        self.options = WorkerOptions(
            orderly=orderly, broadcasting=broadcasting, batch_size=consume_batch_size,
            pull_batch_size=pull_batch_size, long_poll_ms=long_poll_ms,
            max_inflight=max(max_inflight_per_queue, consume_batch_size),
            max_reconsume_times=max_reconsume_times, suspend_seconds=suspend_seconds,
            consume_from=consume_from)
        self._subscriptions: dict[str, str] = {}  # topic -> tag expression
        self._workers: dict[tuple[str, int], QueueWorker] = {}
        self._local_offsets: dict[tuple[str, int], int] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._slots: asyncio.Semaphore | None = None
        self._rebalance_now = asyncio.Event()
        self._topic_missing = False
        self._rebalance_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False
        self._registered = True  # False: a subscription changed since the last heartbeat

    @property
    def client_id(self) -> str:
        return self.client.client_id

    @property
    def config(self) -> ClientConfig:
        """The settings its connection was made with (its pull client's)."""
        return self.client.config

    @property
    def closed(self) -> bool:
        return self._closed

    def subscribe(self, topic: str, tag_expr: str | None = None) -> None:
        """Consume ``topic`` (``tag_expr`` like ``"TagA || TagB"``, ``"*"`` for all)."""
        if not topic or topic.startswith("%"):
            raise ValueError(f"cannot subscribe to {topic!r}: not a user topic")
        self._subscriptions[topic] = tag_expr or self.default_tag_expr
        self._register(topic, self._subscriptions[topic])
        if self._started:
            self._registered = False
            self._rebalance_now.set()

    def register_listener(self, listener: MessageListener) -> None:
        self.listener = listener

    def _register(self, topic: str, tag_expr: str) -> None:
        self.client.session.add_subscription(m.ConsumerSubscription(
            group=self.group, topic=topic, tag_expr=tag_expr, broadcasting=self.broadcasting))

    def _topics(self) -> dict[str, str]:
        topics = dict(self._subscriptions)
        if not self.broadcasting:
            topics[retry_topic(self.group)] = "*"
        return topics

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, register, take the first assignment and start consuming."""
        if self._closed:
            raise ClientClosedError("this consumer was shut down; make a new one")
        if self._started:
            return
        if self.listener is None:
            raise ValueError("register a listener before start()")
        if not self.broadcasting:
            self._register(retry_topic(self.group), "*")
        self._executor = concurrent.futures.ThreadPoolExecutor(
            self.consume_threads, thread_name_prefix=f"consume-{self.group}")
        self._slots = asyncio.Semaphore(self.consume_threads)
        try:
            await self.client.start()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise
        self._started = True
        self.client.session.on_connect(self._rebalance_now.set)
        await self.rebalance()
        self._rebalance_task = asyncio.create_task(self._rebalance_loop(),
                                                   name=f"rebalance {self.group}")

    async def shutdown(self) -> None:
        """Stop pulling, let listeners in progress finish (``shutdown_timeout``), unregister."""
        if self._closed:
            return
        self._closed = True
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rebalance_task
        workers = list(self._workers.values())
        self._workers.clear()
        await asyncio.gather(*(w.stop(self.shutdown_timeout) for w in workers))
        pending = set().union(*(w.pending_tasks for w in workers)) if workers else set()
        finished = True
        if pending:
            _done, left = await asyncio.wait(pending, timeout=self.shutdown_timeout)
            finished = not left
            for task in left:
                task.cancel()
            if left:
                log.warning("%d message batches were still being consumed at shutdown; they "
                            "will be delivered again", len(left))
        if self._executor is not None:
            self._executor.shutdown(wait=finished, cancel_futures=True)
        await self.client.shutdown()

    # -- rebalance ---------------------------------------------------------------------

    def assigned_queues(self) -> dict[str, list[int]]:
        """The queues this member consumes now, by topic."""
        out: dict[str, list[int]] = {}
        for topic, queue_id in sorted(self._workers):
            out.setdefault(topic, []).append(queue_id)
        return out

    async def rebalance(self) -> None:
        """Ask the broker for this member's queues of every topic; start and stop workers."""
        if self._closed:
            return
        if not self._registered:
            self._registered = True
            try:
                await self.client.session.heartbeat()
            except BrokerError as exc:
                self._registered = False
                log.warning("heartbeat of group %s failed: %s", self.group, exc)
        missing = False
        for topic, tag_expr in self._topics().items():
            try:
                queues = set(await self.client.assignment(topic))
            except BrokerError as exc:
                log.warning("assignment of %s for group %s failed: %s", topic, self.group, exc)
                continue
            if not queues and not topic.startswith(RETRY_PREFIX):
                missing = True  # the topic does not exist yet (subscribing does not create it)
            held = {q for (t, q) in self._workers if t == topic}
            for queue_id in sorted(held - queues):
                worker = self._workers.pop((topic, queue_id))
                log.info("%s: %s/%d moved to another member", self.group, topic, queue_id)
                await worker.stop(self.shutdown_timeout)
            for queue_id in sorted(queues - held):
                if self.closed:  # shut down while we waited for the broker
                    return
                worker = QueueWorker(self.client, topic, queue_id,
                                     options=_with_tags(self.options, tag_expr),
                                     consume=self._consume, local_offsets=self._local_offsets)
                self._workers[(topic, queue_id)] = worker
                worker.start()
        self._topic_missing = missing

    async def _rebalance_loop(self) -> None:
        while True:
            # While a subscribed topic has no queues yet, ask again soon: it
            # appears when a producer first sends to it.
            wait = min(0.5, self.rebalance_interval) if self._topic_missing \
                else self.rebalance_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._rebalance_now.wait(), wait)
            self._rebalance_now.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance of group %s failed", self.group)

    async def _consume(self, messages: list[ReceivedMessage]) -> ConsumeResult:
        listener, executor, slots = self.listener, self._executor, self._slots
        if listener is None or executor is None or slots is None:
            return ConsumeResult.RECONSUME_LATER
        return await call_listener(listener, messages, batch=self.options.batch_size > 1,
                                   executor=executor, slots=slots)


def _with_tags(options: WorkerOptions, tag_expr: str) -> WorkerOptions:
    return dataclasses.replace(options, tag_expr=tag_expr)


class PushConsumerOptions(ConnectionOptions, total=False):
    """:class:`AsyncPushConsumer`'s keywords (its signature has the defaults);
    :class:`PushConsumer` passes them on as they are."""

    listener: MessageListener | None
    tag_expr: str
    consume_threads: int
    broadcasting: bool
    orderly: bool
    max_reconsume_times: int
    consume_batch_size: int
    pull_batch_size: int
    long_poll_ms: int
    rebalance_interval: float
    consume_from: ConsumeFrom
    max_inflight_per_queue: int
    suspend_seconds: float
    shutdown_timeout: float


class PushConsumer(GroupSyncClient[AsyncPushConsumer]):
    """The sync push consumer: an :class:`AsyncPushConsumer` on a background event loop.

    ``listener`` runs on ``consume_threads`` worker threads; the keywords are
    :class:`AsyncPushConsumer`'s.
    """

    def __init__(self, group: str, server: str | None = None,
                 **options: Unpack[PushConsumerOptions]) -> None:
        self._async = AsyncPushConsumer(group, server, **options)
        self._loop = None

    @property
    def consumer(self) -> AsyncPushConsumer:
        """The asyncio consumer underneath (runs on this object's background loop)."""
        return self._async

    def subscribe(self, topic: str, tag_expr: str | None = None) -> None:
        if self._loop is None:
            self.consumer.subscribe(topic, tag_expr)
        else:
            self._loop.call_soon(self.consumer.subscribe, topic, tag_expr)

    def register_listener(self, listener: MessageListener) -> None:
        self.consumer.register_listener(listener)

    _kind = "consumer"
    _loop_prefix = "broker-lite-push"

    def _shutdown_timeout(self) -> float:
        return self.consumer.shutdown_timeout * 2 + 10

    def _after_failed_start(self, loop: LoopThread) -> None:
        with contextlib.suppress(BrokerError):
            loop.run(self.consumer.shutdown(), timeout=10)

    def assigned_queues(self) -> dict[str, list[int]]:
        if self._loop is None:
            return {}
        return self._loop.run(_snapshot(self.consumer))



async def _snapshot(consumer: AsyncPushConsumer) -> dict[str, list[int]]:
    return consumer.assigned_queues()
