"""Topics: names, queues, permissions, attributes, auto-create, and queue selection on send.

A topic may carry RocketMQ's topic attributes (``TopicAttributes``); the one
broker_lite knows is ``message.type`` (NORMAL, FIFO, DELAY, TRANSACTION or
MIXED; a topic without it is NORMAL, as RocketMQ's ``TopicConfig.
getTopicMessageType``), set like ``mqadmin updateTopic -a +message.type=TRANSACTION``.
Only the gRPC door's proxy mode enforces it (docs/grpc-proxy-semantics.md).
"""

from __future__ import annotations

import itertools
import threading
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker_lite.core.state_file import load_json, save_json
from broker_lite.errors import NoPermissionError, RequestError, TopicNotFoundError
from broker_lite.values.names import (
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    is_system_topic,
    validate_topic,
)

__all__ = [
    "DLQ_PREFIX",
    "HALF_TOPIC",
    "MESSAGE_TYPE",
    "MESSAGE_TYPES",
    "OP_TOPIC",
    "PERM_READ",
    "PERM_WRITE",
    "RETRY_PREFIX",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_QUEUES",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TopicConfig",
    "TopicManager",
    "check_attributes",
]

#: the broker's own topics and their queue counts (18 delay levels + 1 timer queue)
SYSTEM_TOPIC_QUEUES = {HALF_TOPIC: 1, OP_TOPIC: 1, TRANS_CHECK_MAX_TIME_TOPIC: 1,
                       SCHEDULE_TOPIC: 19}
SYSTEM_TOPICS = frozenset(SYSTEM_TOPIC_QUEUES)
PERM_READ = 4
PERM_WRITE = 2
#: the topic attribute naming the message types a topic takes, and its values
MESSAGE_TYPE = "message.type"
MESSAGE_TYPES = frozenset({"NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"})


def check_attributes(attributes: Mapping[str, str]) -> dict[str, str]:
    """Known attributes with valid values, or RequestError naming the bad one."""
    for key, value in attributes.items():
        if key != MESSAGE_TYPE:
            raise RequestError(f"unsupported topic attribute {key!r} (supported: {MESSAGE_TYPE})")
        if value not in MESSAGE_TYPES:
            raise RequestError(f"topic attribute {MESSAGE_TYPE} must be one of "
                               f"{', '.join(sorted(MESSAGE_TYPES))}, got {value!r}")
    return dict(attributes)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    queues: int
    perm: int = PERM_READ | PERM_WRITE
    attributes: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def message_type(self) -> str:
        """RocketMQ's ``TopicMessageType`` of the topic: NORMAL unless an attribute says."""
        return self.attributes.get(MESSAGE_TYPE, "NORMAL")

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)


class TopicManager:
    """The topic table, persisted in ``topics.json``."""

    def __init__(self, path: Path, *, auto_create: bool, default_queues: int) -> None:
        self._path = path
        self._auto_create = auto_create
        self._default_queues = default_queues
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._dirty = False
        for name, raw in (load_json(path) or {}).items():
            self._topics[name] = TopicConfig(name, int(raw["queues"]), int(raw["perm"]),
                                             dict(raw.get("attributes") or {}))

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def create(self, name: str, queues: int | None = None, perm: int = PERM_READ | PERM_WRITE,
               *, system: bool = False, attributes: Mapping[str, str] | None = None,
               removed: tuple[str, ...] = ()) -> TopicConfig:
        """Create or update a topic. Queue counts only grow (queues hold data).

        ``attributes`` are set (kept when ``None``), ``removed`` ones dropped, like
        mqadmin's ``+key=value`` and ``-key``.
        """
        validate_topic(name)
        if not system and is_system_topic(name):
            raise NoPermissionError(f"topic {name!r} is reserved for the broker")
        count = self._default_queues if queues is None else queues
        if not 1 <= count <= 1024:
            raise RequestError(f"queues must be in [1, 1024], got {count}")
        if perm & ~(PERM_READ | PERM_WRITE) or perm == 0:
            raise RequestError(f"perm must be 2 (write), 4 (read) or 6 (both), got {perm}")
        wanted = check_attributes(attributes or {})
        check_attributes(dict.fromkeys(removed, "NORMAL"))
        with self._lock:
            old = self._topics.get(name)
            merged = {**(old.attributes if old else {}), **wanted}
            for key in removed:
                merged.pop(key, None)
            config = TopicConfig(name, max(count, old.queues if old else 0), perm, merged)
            if config != old:
                self._topics[name] = config
                self._dirty = True
        return config

    def ensure(self, name: str, *, for_write: bool) -> TopicConfig:
        """The topic for a send or pull; auto-creates user topics when allowed."""
        config = self._topics.get(name)
        if config is None:
            is_internal = (name in SYSTEM_TOPICS or name.startswith((RETRY_PREFIX, DLQ_PREFIX)))
            if not (self._auto_create or is_internal):
                validate_topic(name)
                raise TopicNotFoundError(name, hint=" (auto-create is off; create it first)")
            queues = SYSTEM_TOPIC_QUEUES.get(name, 1) if is_internal else None
            config = self.create(name, queues, system=is_internal)
        if for_write and not config.writable:
            raise NoPermissionError(f"topic {name!r} is not writable (perm {config.perm})")
        if not for_write and not config.readable:
            raise NoPermissionError(f"topic {name!r} is not readable (perm {config.perm})")
        return config

    def select_queue(self, config: TopicConfig, queue_id: int, sharding_key: str | None) -> int:
        """An explicit queue, the sharding key's queue (same key, same queue), or round robin."""
        if queue_id >= 0:
            if queue_id >= config.queues:
                raise RequestError(
                    f"queue {queue_id} does not exist in {config.name!r} ({config.queues} queues)"
                )
            return queue_id
        if sharding_key:
            return zlib.crc32(sharding_key.encode("utf-8")) % config.queues
        counter = self._round_robin.get(config.name)
        if counter is None:
            counter = self._round_robin.setdefault(config.name, itertools.count())
        return next(counter) % config.queues

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda t: t.name)

    def persist(self) -> None:
        with self._lock:
            if not self._dirty:
                return
            data = {t.name: {"queues": t.queues, "perm": t.perm,
                             **({"attributes": dict(t.attributes)} if t.attributes else {})}
                    for t in self._topics.values()}
            self._dirty = False
        if not save_json(self._path, data):
            self._dirty = True
