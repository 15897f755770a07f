"""Delayed delivery: RocketMQ's delay levels, plus absolute delivery times.

A delayed message is stored on ``SCHEDULE_TOPIC_XXXX`` with ``REAL_TOPIC`` and
``REAL_QID``: queue ``level - 1`` for delay level ``level`` (1..18), and queue
18 for an absolute delivery time (``TIMER_DELIVER_MS``, what the gRPC door's
DELAY messages carry). :meth:`DelayService.deliver_due` copies each due message
to its real queue. Every level queue is FIFO in due time, so its scan stops at
the first message not yet due; the timer queue is kept in a heap.

Progress (the next schedule-queue offset per queue) is saved with
:meth:`persist`. After a crash, messages delivered since the last save are
delivered again: at least once, with the message id as the dedupe key.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable
from pathlib import Path

from broker_lite.core.state_file import load_json, save_json
from broker_lite.core.topics import SCHEDULE_TOPIC
from broker_lite.errors import RequestError
from broker_lite.storage import MessageStore, MessageToStore, StoredRecord
from broker_lite.storage.properties import DELAY, REAL_QID, REAL_TOPIC

__all__ = ["DELAY_LEVELS_MS", "TIMER_DELIVER_MS", "TIMER_QUEUE", "DelayService"]

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000}
#: RocketMQ's messageDelayLevel table, levels 1 to 18
DELAY_LEVELS_TEXT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DELAY_LEVELS_MS = tuple(int(tok[:-1]) * _UNITS[tok[-1]] for tok in DELAY_LEVELS_TEXT.split())
TIMER_QUEUE = len(DELAY_LEVELS_MS)  # 18
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
_INTERNAL = (DELAY, REAL_TOPIC, REAL_QID, TIMER_DELIVER_MS)


class DelayService:
    def __init__(self, store: MessageStore, path: Path, *, time_scale: float,
                 notify: Callable[[str, int], None]) -> None:
        self._store = store
        self._path = path
        self._scale = time_scale
        self._notify = notify
        self._lock = threading.Lock()
        raw = load_json(path) or {}
        self._progress: dict[int, int] = {int(k): int(v) for k, v in raw.items()}
        self._dirty = False
        self._timers: list[tuple[int, int]] = []  # (deliver_at_ms, schedule-queue offset)
        self._load_timers()

    def delay_ms(self, level: int) -> int:
        return int(DELAY_LEVELS_MS[level - 1] * self._scale)

    def _load_timers(self) -> None:
        low, high = self._store.queue_offsets(SCHEDULE_TOPIC, TIMER_QUEUE)
        offset = max(low, self._progress.get(TIMER_QUEUE, 0))
        while offset < high:
            records, offset = self._store.read_queue(SCHEDULE_TOPIC, TIMER_QUEUE, offset, 256)
            for record in records:
                due = int(record.properties.get(TIMER_DELIVER_MS, "0"))
                heapq.heappush(self._timers, (due, record.queue_offset))

    def schedule(self, msg: MessageToStore, *, level: int, deliver_at_ms: int) -> tuple[int, int]:
        """Store ``msg`` (already aimed at its real topic/queue) to be delivered later.

        Returns ``(schedule-queue offset, end offset)``.
        """
        if not 0 <= level <= len(DELAY_LEVELS_MS):
            raise RequestError(f"delay level {level} is not in [1, {len(DELAY_LEVELS_MS)}]")
        props = dict(msg.properties)
        props.update({REAL_TOPIC: msg.topic, REAL_QID: str(msg.queue_id)})
        if deliver_at_ms:
            queue = TIMER_QUEUE
            props[TIMER_DELIVER_MS] = str(deliver_at_ms)
        else:
            queue = level - 1
            props[DELAY] = str(level)
        put = self._store.put_nowait(MessageToStore(
            topic=SCHEDULE_TOPIC, queue_id=queue, body=msg.body, flag=msg.flag,
            properties=props, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
            reconsume_times=msg.reconsume_times))
        if deliver_at_ms:
            with self._lock:
                heapq.heappush(self._timers, (deliver_at_ms, put.queue_offset))
        return put.queue_offset, put.end_offset

    def deliver_due(self, now_ms: int | None = None) -> int:
        """Copy every due message to its real queue; return how many went."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        delivered = 0
        with self._lock:
            for level in range(1, len(DELAY_LEVELS_MS) + 1):
                delivered += self._deliver_level(level, now)
            while self._timers and self._timers[0][0] <= now:
                _due, offset = heapq.heappop(self._timers)
                records, _ = self._store.read_queue(SCHEDULE_TOPIC, TIMER_QUEUE, offset, 1)
                if records:
                    self._deliver(records[0])
                    delivered += 1
                low = min((o for _d, o in self._timers), default=offset + 1)
                self._progress[TIMER_QUEUE] = low
                self._dirty = True
        return delivered

    def _deliver_level(self, level: int, now: int) -> int:
        queue = level - 1
        low, high = self._store.queue_offsets(SCHEDULE_TOPIC, queue)
        offset = max(low, self._progress.get(queue, 0))
        delay = self.delay_ms(level)
        count = 0
        while offset < high:
            records, next_offset = self._store.read_queue(SCHEDULE_TOPIC, queue, offset, 64)
            for record in records:
                if record.store_timestamp + delay > now:
                    self._set_progress(queue, record.queue_offset)
                    return count
                self._deliver(record)
                count += 1
            offset = next_offset
        self._set_progress(queue, offset)
        return count

    def _set_progress(self, queue: int, offset: int) -> None:
        if self._progress.get(queue) != offset:
            self._progress[queue] = offset
            self._dirty = True

    def _deliver(self, record: StoredRecord) -> None:
        props = {k: v for k, v in record.properties.items() if k not in _INTERNAL}
        topic = record.properties[REAL_TOPIC]
        queue_id = int(record.properties.get(REAL_QID, "0"))
        self._store.put_nowait(MessageToStore(
            topic=topic, queue_id=queue_id, body=record.body, flag=record.flag,
            properties=props, born_timestamp=record.born_timestamp, born_host=record.born_host,
            reconsume_times=record.reconsume_times))
        self._notify(topic, queue_id)

    def next_due_ms(self) -> int | None:
        """When the earliest scheduled message falls due (for the server's timer)."""
        with self._lock:
            return self._timers[0][0] if self._timers else None

    def persist(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            data = {str(k): v for k, v in self._progress.items()}
            self._dirty = False
        if not save_json(self._path, data):
            self._dirty = True
