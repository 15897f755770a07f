"""One assigned queue of a push consumer: long-poll it, hand messages over, ack or send back.

A :class:`QueueWorker` starts at the group's committed offset (or, for a
queue the group never committed on, where ``consume_from`` says), then
long-polls ``PULL_MESSAGE`` in a loop. Each batch of messages goes to the
listener:

- concurrently (the default): every batch is its own task, at most
  ``max_inflight`` messages per queue; acks may come back out of order,
  which the broker handles;
- orderly: one batch at a time, in queue order; a failure is retried in
  place after ``suspend_seconds`` (RocketMQ's SUSPEND_CURRENT_QUEUE) and,
  past ``max_reconsume_times``, sent to the DLQ so the queue moves on.

Then ``ACK_MESSAGE`` on success; on failure ``CONSUMER_SEND_BACK`` (the
broker redelivers through ``%RETRY%group`` with the delay schedule and dead-
letters after ``max_reconsume_times``). A broadcasting consumer keeps its
offsets in memory and neither acks nor sends back: a failed message is
logged and dropped, as RocketMQ does.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from broker_lite.client.listener import ConsumeFrom, ConsumeResult
from broker_lite.client.message import ReceivedMessage
from broker_lite.client.pull_consumer import OFFSET_MOVED, AsyncPullConsumer
from broker_lite.errors import BrokerError, MessageNotFoundError, UnavailableError

__all__ = ["QueueWorker", "WorkerOptions"]

log = logging.getLogger("broker_lite.client.consumer")

Consume = Callable[[list[ReceivedMessage]], Awaitable[ConsumeResult]]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    tag_expr: str = "*"
    orderly: bool = False
    broadcasting: bool = False
    batch_size: int = 1
    pull_batch_size: int = 32
    long_poll_ms: int = 15_000
    max_inflight: int = 256
    max_reconsume_times: int = 16
    suspend_seconds: float = 1.0
    consume_from: ConsumeFrom = ConsumeFrom.FIRST_OFFSET
    #: wait after a failed pull, doubled up to 10x while failures go on
    retry_delay: float = 0.2


class QueueWorker:
    """Consumes one ``(topic, queue_id)`` until :meth:`stop`."""

    def __init__(self, client: AsyncPullConsumer, topic: str, queue_id: int, *,
                 options: WorkerOptions, consume: Consume,
                 local_offsets: dict[tuple[str, int], int]) -> None:
        self.client = client
        self.topic = topic
        self.queue_id = queue_id
        self.options = options
        self._consume = consume
        self._local_offsets = local_offsets  # broadcasting: this client's own offsets
        self._room = asyncio.Semaphore(options.max_inflight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._processing = False
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<QueueWorker {self.topic}/{self.queue_id}>"

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pull {self.topic}/{self.queue_id}")

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop pulling; an orderly batch being consumed finishes first (within ``timeout``)."""
        self._stopping = True
        task = self._task
        if task is None:
            return
        if not self._processing:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), timeout)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def pending_tasks(self) -> set[asyncio.Task[None]]:
        """Batches being consumed right now (concurrent mode)."""
        return set(self._tasks)

    # -- the pull loop -------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        offset: int | None = None
        while not self._stopping:
            try:
                if offset is None:
                    offset = await self._start_offset()
                result = await self.client.pull(
                    self.topic, self.queue_id, offset, self.options.pull_batch_size,
                    long_poll_ms=self.options.long_poll_ms, tag_expr=self.options.tag_expr)
            except BrokerError as exc:
                failures += 1
                delay = min(self.options.retry_delay * 2 ** min(failures - 1, 4),
                            self.options.retry_delay * 10)
                level = logging.DEBUG if isinstance(exc, UnavailableError) else logging.WARNING
                log.log(level, "pull of %s/%d failed (%s); again in %.2fs", self.topic,
                        self.queue_id, exc, delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            if result.status == OFFSET_MOVED:
                log.info("%s/%d: offset %d is not stored, going on at %d", self.topic,
                         self.queue_id, offset, result.next_offset)
            offset = result.next_offset
            if self.options.broadcasting:
                self._local_offsets[(self.topic, self.queue_id)] = offset
            if result.messages:
                await self._dispatch(result.messages)

    async def _start_offset(self) -> int:
        key = (self.topic, self.queue_id)
        if self.options.broadcasting and key in self._local_offsets:
            return self._local_offsets[key]
        if not self.options.broadcasting:
            committed = await self.client.committed_offset(self.topic, self.queue_id)
            if committed >= 0:
                return committed
        if self.options.consume_from is ConsumeFrom.LAST_OFFSET:
            route = await self.client.topic_route(self.topic)
            if self.queue_id < len(route.max_offsets):
                return route.max_offsets[self.queue_id]
        return 0  # before the first stored offset: the broker answers offset_moved

    async def _dispatch(self, messages: list[ReceivedMessage]) -> None:
        size = max(1, self.options.batch_size)
        batches = [messages[i:i + size] for i in range(0, len(messages), size)]
        for batch in batches:
            if self.options.orderly:
                self._processing = True
                try:
                    await self._consume_orderly(batch)
                finally:
                    self._processing = False
                if self._stopping:
                    return
                continue
            for _ in batch:
                await self._room.acquire()
            task = asyncio.create_task(self._consume_concurrently(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- consuming -----------------------------------------------------------------

    async def _consume_concurrently(self, batch: list[ReceivedMessage]) -> None:
        try:
            result = await self._consume(batch)
            if result is ConsumeResult.SUCCESS:
                await self._ack_all(batch)
            else:
                await self._give_back(batch)
        finally:
            for _ in batch:
                self._room.release()

    async def _consume_orderly(self, batch: list[ReceivedMessage]) -> None:
        while True:
            result = await self._consume(batch)
            if result is ConsumeResult.SUCCESS:
                await self._ack_all(batch)
                return
            if self.options.broadcasting:
                self._drop(batch)
                return
            if max(m.reconsume_times for m in batch) >= self.options.max_reconsume_times:
                for message in batch:
                    await self._to_dlq(message)
                return
            await asyncio.sleep(self.options.suspend_seconds)
            batch = [m.with_reconsume_times(m.reconsume_times + 1) for m in batch]

    async def _ack_all(self, batch: list[ReceivedMessage]) -> None:
        if self.options.broadcasting:
            return
        await asyncio.gather(*(
            self._request(functools.partial(self.client.ack, message), "ack", message)
            for message in batch))

    async def _give_back(self, batch: list[ReceivedMessage]) -> None:
        if self.options.broadcasting:
            self._drop(batch)
            return
        for message in batch:
            sent = await self._request(functools.partial(self.client.send_back, message),
                                       "send back", message)
            if not sent:
                # RocketMQ's fallback: consume it again here, a little later.
                task = asyncio.create_task(self._retry_locally(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _retry_locally(self, message: ReceivedMessage) -> None:
        await asyncio.sleep(max(self.options.suspend_seconds, 1.0))
        await self._room.acquire()
        await self._consume_concurrently([message.with_reconsume_times(
            message.reconsume_times + 1)])

    async def _to_dlq(self, message: ReceivedMessage) -> None:
        await self._request(functools.partial(self.client.send_back, message, delay_level=-1),
                            "send to the DLQ", message)

    def _drop(self, batch: list[ReceivedMessage]) -> None:
        for message in batch:
            log.warning("broadcasting: message %s failed and is dropped (no retry in "
                        "broadcasting mode)", message.msg_id)

    async def _request(self, make: Callable[[], Awaitable[None]], what: str,
                       message: ReceivedMessage, attempts: int = 3) -> bool:
        """Run an ack or send-back, trying again while the broker is unavailable."""
        for attempt in range(1, attempts + 1):
            try:
                await make()
                return True
            except MessageNotFoundError as exc:
                log.warning("%s of %s: %s", what, message.msg_id, exc)
                return True  # the broker no longer has it: nothing left to do
            except UnavailableError as exc:
                log.warning("%s of %s failed (attempt %d of %d): %s", what, message.msg_id,
                            attempt, attempts, exc)
            except BrokerError as exc:
                log.error("%s of %s refused: %s", what, message.msg_id, exc)
                return False
        return False
