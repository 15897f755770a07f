"""A native push-consumer listener that keeps every delivery it gets, thread-safely.

``PushConsumer(group, server, listener=Recorder())`` records each message it
is handed and answers SUCCESS (or what ``decide`` says); the test reads the
copies through :meth:`Recorder.messages`, :meth:`bodies`, :meth:`msg_ids` or
:meth:`count` while the consumer threads keep appending.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from broker_lite.client import ConsumeResult, ReceivedMessage

__all__ = ["Recorder"]


class Recorder:
    """A push-consumer listener that records each delivery; ``decide`` picks the result."""

    def __init__(self, decide: Callable[[ReceivedMessage], ConsumeResult] | None = None) -> None:
        self._decide = decide or (lambda msg: ConsumeResult.SUCCESS)
        self._lock = threading.Lock()
        self.seen: list[ReceivedMessage] = []

    def __call__(self, msg: ReceivedMessage) -> ConsumeResult:
        with self._lock:
            self.seen.append(msg)
        return self._decide(msg)

    def messages(self) -> list[ReceivedMessage]:
        """A copy of every delivery so far, in the order they came."""
        with self._lock:
            return list(self.seen)

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [m.body for m in self.seen]

    def msg_ids(self) -> set[str]:
        """The distinct message ids delivered so far."""
        with self._lock:
            return {m.msg_id for m in self.seen}

    def count(self) -> int:
        with self._lock:
            return len(self.seen)
