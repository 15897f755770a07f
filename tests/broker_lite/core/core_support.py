"""Core test helpers: a real Broker on a real store, a producer endpoint, pull_all."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_lite.core import Broker, BrokerConfig, model
from broker_lite.storage import StoreConfig

#: the ``open_broker`` fixture: ``open_broker(**config_overrides)`` opens a Broker
Opener = Callable[..., Broker]


class ProducerEndpoint:
    """The producer side of a connection, as the core sees it (a ``Channel``).

    It records the check-back requests the broker sends it; a test answers
    them the way a producer would, through ``Broker.end_transaction``.
    """

    def __init__(self, client_id: str = "producer-1") -> None:
        self.client_id = client_id
        self.remote_address = "127.0.0.1:5555"
        self.alive = True
        self.checks: list[model.CheckRequest] = []
        self._lock = threading.Lock()

    def is_alive(self) -> bool:
        return self.alive

    def send_check(self, request: model.CheckRequest) -> None:
        with self._lock:
            self.checks.append(request)


def make_broker(data_dir: Path, **overrides: Any) -> Broker:
    store_keys = {"flush", "segment_size"}
    store = StoreConfig(data_dir=data_dir, segment_size=overrides.pop("segment_size", 1 << 20),
                        **{k: overrides.pop(k) for k in list(overrides) if k in store_keys})
    return Broker(BrokerConfig(store=store, **overrides))


def pull_all(broker: Broker, topic: str, group: str = "g") -> list[model.DeliveredMessage]:
    """Everything visible on ``topic`` from offset 0, across its queues."""
    info = broker.topic_route(topic)
    found: list[model.DeliveredMessage] = []
    for queue_id in range(info.queues):
        offset = 0
        while True:
            response = broker.pull(model.PullQuery(group=group, topic=topic, queue_id=queue_id,
                                                   offset=offset, max_messages=64))
            found.extend(response.messages)
            if response.next_offset == offset:
                break
            offset = response.next_offset
    return found
