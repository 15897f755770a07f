"""Consumer-group offsets, kept by the broker, plus per-message acks.

A group's committed offset on a queue is the first queue offset it has not
consumed. Acks may arrive out of order (a push consumer works on many messages
at once); acked offsets above the committed one are held until the gap below
them closes, then the committed offset jumps past them.

Offsets are saved to ``offsets.json`` by :meth:`persist` (the server calls it
every second and at shutdown). After a crash a group resumes from the last
saved offsets, so up to a second of messages may be delivered again: delivery
is at least once, and every message carries its id as the dedupe key.
"""

from __future__ import annotations

import threading
from pathlib import Path

from broker_lite.core.state_file import load_json, save_json

__all__ = ["OffsetManager"]

QueueKey = tuple[str, str, int]  # group, topic, queue id


class OffsetManager:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._committed: dict[QueueKey, int] = {}
        self._acked: dict[QueueKey, set[int]] = {}
        self._dirty = False
        for key, value in (load_json(path) or {}).items():
            group, topic, queue = key.rsplit("@", 2)
            self._committed[(group, topic, int(queue))] = int(value)

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed on this queue."""
        return self._committed.get((group, topic, queue_id), -1)

    def update(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set the committed offset (a pull consumer committing, or an admin reset)."""
        key = (group, topic, queue_id)
        with self._lock:
            self._committed[key] = offset
            pending = self._acked.get(key)
            if pending:
                self._acked[key] = {o for o in pending if o > offset}
            self._dirty = True

    def ack(self, group: str, topic: str, queue_id: int, queue_offset: int,
            floor: int) -> int:
        """Record one consumed message; return the committed offset after it.

        ``floor`` is the queue's smallest stored offset: a group that never
        committed starts there.
        """
        key = (group, topic, queue_id)
        with self._lock:
            committed = self._committed.get(key, -1)
            if committed < 0:
                committed = floor
            if queue_offset < committed:
                return committed  # already consumed: a redelivery's ack
            pending = self._acked.setdefault(key, set())
            pending.add(queue_offset)
            while committed in pending:
                pending.discard(committed)
                committed += 1
            self._committed[key] = committed
            self._dirty = True
            return committed

    def all(self) -> dict[QueueKey, int]:
        """Every committed offset, by (group, topic, queue id)."""
        with self._lock:
            return dict(self._committed)

    def groups_of(self, topic: str) -> set[str]:
        with self._lock:
            return {g for (g, t, _q) in self._committed if t == topic}

    def persist(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            data = {f"{g}@{t}@{q}": o for (g, t, q), o in self._committed.items()}
            self._dirty = False
        if not save_json(self._path, data):
            self._dirty = True
