"""A native push-consumer listener that keeps every delivery it gets, thread-safely.

``PushConsumer(group, server, listener=Recorder())`` records each message it
is handed and answers SUCCESS (or what ``decide`` says); the test reads the
copies through :meth:`Recorder.messages`, :meth:`bodies`, :meth:`msg_ids` or
:meth:`count` while the consumer threads keep appending. :class:`Collector`
is such a consumer of one topic, with waits on the keys it received.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from broker_lite.client import ConsumeResult, PushConsumer, ReceivedMessage

from .waiting import wait_until

__all__ = ["Collector", "Recorder"]


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


class Collector:
    """A push consumer of ``topic`` (``group``) that records every delivery (a context
    manager: started on entry, shut down on exit); ``options`` go to the PushConsumer."""

    def __init__(self, server: str, topic: str, group: str, **options: Any) -> None:
        self._recorder = Recorder()
        self.consumer = PushConsumer(group, server, listener=self._recorder,
                                     rebalance_interval=0.5, **options)
        self.consumer.subscribe(topic)

    @property
    def messages(self) -> list[ReceivedMessage]:
        return self._recorder.messages()

    def keys(self) -> list[str]:
        """The dedupe keys (the outbox's tx ids) in delivery order."""
        return [m.dedupe_key for m in self._recorder.messages()]

    def wait_for(self, expected: set[str], timeout: float = 20.0) -> None:
        """Wait until every key in ``expected`` was consumed (others may come too)."""
        wait_until(lambda: expected <= set(self.keys()), timeout=timeout,
                   message=lambda: f"received {sorted(self.keys())}, "
                                   f"expected {sorted(expected)}")

    def wait_for_keys(self, keys: list[str], timeout: float = 20.0) -> None:
        """Wait until exactly ``keys`` were consumed, in this order."""
        wait_until(lambda: self.keys() == keys, timeout=timeout,
                   message=lambda: f"consumed {self.keys()}")

    def __enter__(self) -> Collector:
        self.consumer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.consumer.shutdown()
