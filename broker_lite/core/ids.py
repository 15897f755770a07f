"""Message ids: 32 random hex digits, the shape of RocketMQ's unique ids (``UNIQ_KEY``)."""

from __future__ import annotations

import os
import threading

__all__ = ["new_msg_id"]


class _RandomIds:
    """Random 32-hex-digit ids, cut from a pool of ``os.urandom`` bytes made 256 ids at a
    time: one system call per 256 ids, not one per id, and the same randomness."""

    _IDS_PER_POOL = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool = ""
        self._pos = 0

    def next(self) -> str:
        with self._lock:
            pos = self._pos
            if pos >= len(self._pool):
                self._pool = os.urandom(16 * self._IDS_PER_POOL).hex().upper()
                pos = 0
            self._pos = pos + 32
            return self._pool[pos : pos + 32]


_ids = _RandomIds()


def new_msg_id() -> str:
    """A 32-hex-digit unique (random) id, the shape of RocketMQ's message ids."""
    return _ids.next()
