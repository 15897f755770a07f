"""RocketMQ 5's pop-style consumption, built on the core's pull, ack and send-back.

A v5 consumer *receives* messages, which then stay invisible to the rest of
its group for an *invisible duration*; it *acks* each one by its receipt
handle, or changes its invisible duration, or lets it expire, after which the
message can be received again with its delivery attempt + 1. The core keeps
offsets, not pops, so this module keeps, per ``(group, topic, queue)``:

* ``next_offset``: the next queue offset to read from the store (at first the
  group's committed offset, or the queue's first offset);
* ``entries``: every message read and not yet settled, with its delivery
  count, the token of its current receipt handle, its invisibility deadline
  and, for auto-renewed receives (push consumers), the client holding it;
* ``pending``: the offsets of entries that are visible now (read ahead, or
  expired), in queue order; ``timers``: a heap of invisibility deadlines.

An ack goes to ``Broker.ack``, so the group's committed offset advances past
every acked message (out-of-order acks are held by the core until the gap
below closes). A message delivered ``max_attempts`` times and not acked goes
to ``%DLQ%group`` through ``Broker.send_back(delay_level=-1)`` once its last
invisible duration passes: :meth:`PopService.revive`, which the door runs every
``revive_interval_seconds`` whether or not the group still polls (RocketMQ's
broker revives expired pops the same way, in its ``PopReviveService``).

**FIFO.** A message with a message group is delivered only when no other
message of its group in the same queue is in flight: a group has at most one
message invisible at a time, so its messages are consumed in send order by
any client type, without a per-group "orderly" setting.

**Restart.** :meth:`PopService.snapshot` (saved to ``pop.json`` with each
revive round and at shutdown) and :meth:`PopService.restore` (at start) keep
what is in flight across a restart, even a ``kill -9``: its delivery count,
handle and deadline; docs/grpc.md says what the last second before a crash loses.

Everything here runs on the event loop's thread; nothing blocks.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import os
import time
from collections.abc import Callable

from broker_lite.core import Broker
from broker_lite.core.model import OFFSET_MOVED, Ack, OffsetQuery, PullQuery, SendBack
from broker_lite.errors import BrokerError
from broker_lite.grpc_door.config import GrpcDoorConfig
from broker_lite.grpc_door.pop_entries import (
    Delivery,
    Entry,
    QueueState,
    ReceiveSpec,
    make_handle,
    parse_handle,
)
from broker_lite.grpc_door.pop_state import PopRecord, stored_message
from broker_lite.grpc_door.status import Code, GrpcDoorError
from broker_lite.storage.properties import SHARDING_KEY

__all__ = ["Delivery", "PopService", "ReceiveSpec"]

log = logging.getLogger("broker_lite.grpc")


class PopService:
    """The in-flight state of every (group, topic, queue) received through the gRPC door."""

    def __init__(self, broker: Broker, config: GrpcDoorConfig, *,
                 client_alive: Callable[[str], bool],
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._broker = broker
        self._config = config
        self._alive = client_alive
        self._clock = clock
        self._wall = wall
        self._states: dict[tuple[str, str], dict[int, QueueState]] = {}
        self._prefix = os.urandom(4).hex()
        self._tokens = itertools.count(1)

    # -- receiving -------------------------------------------------------------------

    def receive(self, spec: ReceiveSpec) -> list[Delivery]:
        """Deliver up to ``spec.batch`` visible messages of the topic, all queues round robin."""
        config = self._broker.topics.get(spec.topic)
        if config is None:
            return []
        queues = config.queues
        found: list[Delivery] = []
        for i in range(queues):
            queue_id = (spec.start_queue + i) % queues
            self._receive_queue(spec, queue_id, found)
            if len(found) >= spec.batch:
                break
        return found

    def _state(self, group: str, topic: str, queue_id: int) -> QueueState:
        per_queue = self._states.setdefault((group, topic), {})
        state = per_queue.get(queue_id)
        if state is None:
            committed = self._committed(group, topic, queue_id)
            low = self._broker.store.queue_offsets(topic, queue_id)[0]
            state = per_queue[queue_id] = QueueState(next_offset=max(committed, low))
        return state

    def _committed(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset on the queue (-1: never committed)."""
        return self._broker.query_offset(OffsetQuery(group=group, topic=topic, queue_id=queue_id))

    def _receive_queue(self, spec: ReceiveSpec, queue_id: int, found: list[Delivery]) -> None:
        state = self._state(spec.group, spec.topic, queue_id)
        now = self._clock()
        self._expire(state, now)
        committed = self._committed(spec.group, spec.topic, queue_id)
        if committed > state.next_offset:  # moved on by another door or an admin
            self._drop_all(state)
            state.next_offset = committed
        seen: set[str] = set()
        snapshot, state.pending = state.pending, []
        keep: list[int] = []
        for offset in snapshot:
            entry = state.entries.get(offset)
            if entry is not None and (len(found) >= spec.batch or not self._offer(
                    spec, queue_id, state, entry, seen, found, now, committed)):
                keep.append(offset)
        state.pending = keep
        while len(found) < spec.batch and len(state.entries) < self._config.max_read_ahead:
            fresh = self._read(spec, queue_id, state)
            if fresh is None:
                break
            for entry in fresh:
                if entry.offset in state.entries:  # restored after a restart, in flight
                    continue
                state.entries[entry.offset] = entry
                if len(found) >= spec.batch or not self._offer(spec, queue_id, state, entry,
                                                               seen, found, now, committed):
                    state.pending.append(entry.offset)

    def _offer(self, spec: ReceiveSpec, queue_id: int, state: QueueState, entry: Entry,
               seen: set[str], found: list[Delivery], now: float, committed: int) -> bool:
        """Deliver ``entry`` if it may go now (True: delivered or settled; False: it waits).

        The caller takes a waiting entry back into ``state.pending``.
        """
        if entry.offset < committed:  # acked meanwhile by someone else
            self._remove(state, entry)
            return True
        if entry.attempts >= spec.max_attempts:
            self._dead_letter(spec.group, spec.topic, queue_id, state, entry)
            return True
        group = entry.group
        if group is not None:
            if group in seen or group in state.busy_groups:
                seen.add(group)
                return False
            seen.add(group)
            state.busy_groups[group] = entry.offset
        entry.attempts += 1
        entry.token = self._new_token()
        entry.invisible_ms = spec.invisible_ms
        entry.deadline = now + spec.invisible_ms / 1000
        entry.client_id = spec.client_id
        entry.auto_renew = spec.auto_renew
        entry.held_since = now
        heapq.heappush(state.timers, (entry.deadline, entry.offset, entry.token))
        found.append(Delivery(entry.message, make_handle(queue_id, entry), entry.attempts,
                              spec.invisible_ms))
        return True

    def _read(self, spec: ReceiveSpec, queue_id: int, state: QueueState) -> list[Entry] | None:
        """Read the next messages from the store; ``None`` when there is nothing new."""
        want = max(1, min(spec.batch, self._config.max_read_ahead - len(state.entries)))
        query = PullQuery(group=spec.group, topic=spec.topic, queue_id=queue_id,
                          offset=state.next_offset, max_messages=want,
                          tag_expr=spec.tag_expr or "*")
        response = self._broker.pull(query)
        if response.status == OFFSET_MOVED:
            log.warning("%s %s/%d: offset %d moved to %d", spec.group, spec.topic, queue_id,
                        state.next_offset, response.next_offset)
            state.next_offset = response.next_offset
            return []
        if response.next_offset <= state.next_offset:
            return None
        delivered = {msg.queue_offset for msg in response.messages}
        filtered = [offset for offset in range(state.next_offset, response.next_offset)
                    if offset not in delivered]  # the tag expression skipped them
        if filtered:
            self._broker.mark_filtered(spec.group, spec.topic, queue_id, filtered)
        state.next_offset = response.next_offset
        return [Entry(msg.queue_offset, msg, msg.properties.get(SHARDING_KEY) or None)
                for msg in response.messages]

    def _expire(self, state: QueueState, now: float) -> None:
        timers = state.timers
        while timers and timers[0][0] <= now:
            deadline, offset, token = heapq.heappop(timers)
            entry = state.entries.get(offset)
            if entry is None or entry.token != token or entry.deadline != deadline:
                continue  # settled, or re-armed since
            if entry.auto_renew and now - entry.held_since < self._config.auto_renew_max_seconds \
                    and self._alive(entry.client_id):
                entry.deadline = now + self._config.auto_renew_invisible_seconds
                heapq.heappush(timers, (entry.deadline, offset, token))
                continue
            self._make_visible(state, entry)

    def _make_visible(self, state: QueueState, entry: Entry) -> None:
        entry.deadline = 0.0
        entry.auto_renew = False
        if entry.group is not None and state.busy_groups.get(entry.group) == entry.offset:
            del state.busy_groups[entry.group]
        bisect.insort(state.pending, entry.offset)

    def _dead_letter(self, group: str, topic: str, queue_id: int, state: QueueState,
                     entry: Entry) -> int:
        self._remove(state, entry)
        try:
            return self._broker.send_back(SendBack(
                group=group, topic=topic, queue_id=queue_id, queue_offset=entry.offset,
                msg_id=entry.message.msg_id, delay_level=-1))
        except BrokerError as exc:  # the message is gone from the store: nothing to move
            log.warning("could not move %s to the DLQ of %s: %s", entry.message.msg_id, group,
                        exc)
            return 0

    def _remove(self, state: QueueState, entry: Entry) -> None:
        state.entries.pop(entry.offset, None)
        if entry.group is not None and state.busy_groups.get(entry.group) == entry.offset:
            del state.busy_groups[entry.group]
        if entry.deadline == 0.0:
            index = bisect.bisect_left(state.pending, entry.offset)
            if index < len(state.pending) and state.pending[index] == entry.offset:
                del state.pending[index]

    def _drop_all(self, state: QueueState) -> None:
        state.entries.clear()
        state.pending.clear()
        state.timers.clear()
        state.busy_groups.clear()

    def _new_token(self) -> str:
        return f"{self._prefix}{next(self._tokens):x}"

    # -- the broker's own rounds: revive, save, restore ---------------------------------

    def revive(self) -> tuple[int, set[str]]:
        """Expire what is due; dead-letter what used its last delivery. No poll needed.

        Returns the number of messages moved to a DLQ and the topics that have
        messages visible again (their long-polling receives should wake).
        """
        now = self._clock()
        limit = self._config.max_delivery_attempts
        moved = 0
        woken: set[str] = set()
        for (group, topic), per_queue in self._states.items():
            for queue_id, state in per_queue.items():
                if not state.timers or state.timers[0][0] > now:
                    continue
                self._expire(state, now)
                for offset in list(state.pending):
                    entry = state.entries.get(offset)
                    if entry is not None and entry.attempts >= limit:
                        self._dead_letter(group, topic, queue_id, state, entry)
                        moved += 1
                if state.pending:
                    woken.add(topic)
        return moved, woken

    def snapshot(self) -> list[PopRecord]:
        """Every message delivered at least once and not settled, for ``pop.json``."""
        now, wall = self._clock(), self._wall()
        return [PopRecord(group, topic, queue_id, entry.offset, entry.message.msg_id,
                          entry.attempts, entry.token, entry.invisible_ms,
                          int((wall + entry.deadline - now) * 1000) if entry.deadline else 0)
                for (group, topic), per_queue in self._states.items()
                for queue_id, state in per_queue.items()
                for entry in state.entries.values() if entry.attempts]

    def restore(self, records: list[PopRecord]) -> int:
        """Take back a snapshot after a restart; returns how many messages are in flight again.

        A record whose message was acked meanwhile (below the committed offset)
        or is gone from the store is dropped.
        """
        now, wall = self._clock(), self._wall()
        restored = 0
        for record in sorted(records, key=lambda r: (r.group, r.topic, r.queue_id, r.offset)):
            topic = self._broker.topics.get(record.topic)
            if topic is None or not 0 <= record.queue_id < topic.queues:
                continue
            state = self._state(record.group, record.topic, record.queue_id)
            if record.offset < state.next_offset or record.offset in state.entries:
                continue
            message = stored_message(self._broker, record)
            if message is None:
                continue
            entry = Entry(record.offset, message, message.properties.get(SHARDING_KEY) or None,
                           attempts=record.attempts, token=record.token,
                           invisible_ms=record.invisible_ms)
            state.entries[entry.offset] = entry
            # hidden until its deadline; one already due expires at the next round, which
            # makes it visible or, after its last delivery, dead-letters it
            due = max(0.0, record.deadline_ms / 1000 - wall) if record.deadline_ms else 0.0
            entry.deadline, entry.held_since = now + due, now
            if entry.group is not None:
                state.busy_groups.setdefault(entry.group, entry.offset)
            heapq.heappush(state.timers, (entry.deadline, entry.offset, entry.token))
            restored += 1
        return restored

    # -- settling ----------------------------------------------------------------------

    def _find(self, group: str, topic: str, handle: str,
              msg_id: str) -> tuple[int, QueueState | None, Entry | None]:
        queue_id, offset, token = parse_handle(handle)
        state = self._states.get((group, topic), {}).get(queue_id)
        entry = state.entries.get(offset) if state is not None else None
        if entry is None:
            settled = state.next_offset if state is not None else \
                self._committed(group, topic, queue_id)
            if offset < settled:  # acked or dead-lettered already: nothing to do
                return queue_id, state, None
            raise GrpcDoorError(Code.INVALID_RECEIPT_HANDLE,
                                f"receipt handle {handle!r} is unknown to {group}/{topic} "
                                "(expired with a broker restart?)")
        if entry.token != token:
            raise GrpcDoorError(Code.INVALID_RECEIPT_HANDLE,
                                f"receipt handle {handle!r} is stale: message "
                                f"{entry.message.msg_id} became visible and was received "
                                "again since")
        if msg_id and msg_id != entry.message.msg_id:
            raise GrpcDoorError(Code.INVALID_RECEIPT_HANDLE,
                                f"receipt handle {handle!r} is for message "
                                f"{entry.message.msg_id}, not {msg_id}")
        return queue_id, state, entry

    def ack(self, group: str, topic: str, handle: str, msg_id: str = "") -> None:
        """Consumed: the group's offset may advance past it. Acking twice is harmless."""
        queue_id, state, entry = self._find(group, topic, handle, msg_id)
        if state is None or entry is None:
            return
        self._broker.ack(Ack(group=group, topic=topic, queue_id=queue_id,
                             queue_offset=entry.offset, msg_id=entry.message.msg_id))
        self._remove(state, entry)

    def change_invisible(self, group: str, topic: str, handle: str, msg_id: str,
                         invisible_ms: int) -> str:
        """Hide the message for ``invisible_ms`` from now; returns its new receipt handle."""
        queue_id, state, entry = self._find(group, topic, handle, msg_id)
        if state is None or entry is None:
            raise GrpcDoorError(Code.INVALID_RECEIPT_HANDLE,
                                f"receipt handle {handle!r}: the message was already acked")
        if entry.deadline == 0.0:
            self._remove(state, entry)
            state.entries[entry.offset] = entry
            if entry.group is not None:
                state.busy_groups.setdefault(entry.group, entry.offset)
        entry.token = self._new_token()
        entry.invisible_ms = invisible_ms
        entry.deadline = self._clock() + invisible_ms / 1000
        entry.auto_renew = False
        heapq.heappush(state.timers, (entry.deadline, entry.offset, entry.token))
        return make_handle(queue_id, entry)

    def forward_to_dlq(self, group: str, topic: str, handle: str, msg_id: str) -> int:
        """Move the message to ``%DLQ%group`` now; returns the store's end offset."""
        queue_id, state, entry = self._find(group, topic, handle, msg_id)
        if state is None or entry is None:
            raise GrpcDoorError(Code.INVALID_RECEIPT_HANDLE,
                                f"receipt handle {handle!r}: the message was already acked")
        return self._dead_letter(group, topic, queue_id, state, entry)

    def client_gone(self, client_id: str) -> int:
        """A client left: what it held by auto-renewal becomes visible shortly."""
        soon = self._clock() + self._config.invisible_when_client_gone_seconds
        released = 0
        for per_queue in self._states.values():
            for state in per_queue.values():
                for entry in state.entries.values():
                    if entry.auto_renew and entry.client_id == client_id and entry.deadline:
                        entry.auto_renew = False
                        entry.deadline = soon
                        heapq.heappush(state.timers, (soon, entry.offset, entry.token))
                        released += 1
        return released

    def next_deadline(self, group: str, topic: str) -> float | None:
        """The earliest invisibility deadline of the group's messages of ``topic``."""
        deadlines = [s.timers[0][0] for s in self._states.get((group, topic), {}).values()
                     if s.timers]
        return min(deadlines) if deadlines else None

    def in_flight(self, group: str, topic: str) -> int:
        """Messages read for the group and not settled (for tests and diagnostics)."""
        return sum(len(s.entries) for s in self._states.get((group, topic), {}).values())
