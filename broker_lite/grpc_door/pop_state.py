"""``pop.json``: the in-flight messages of the gRPC door, saved so a restart keeps them.

One :class:`PopRecord` per message delivered and not settled. The file is a
JSON list of objects with short keys, replaced atomically like the core's
other state files (``state_file.save_json``); deadlines are wall-clock
milliseconds since the epoch (the monotonic clock starts over with the process).
"""

from __future__ import annotations

import logging
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

from broker_lite.core import Broker
from broker_lite.core.model import DeliveredMessage, PullQuery
from broker_lite.core.state_file import load_json, save_json
from broker_lite.errors import BrokerError

__all__ = ["FILE_NAME", "PopRecord", "load_records", "save_records", "stored_message"]

log = logging.getLogger("broker_lite.grpc")

FILE_NAME = "pop.json"

_KEYS = ("g", "t", "q", "o", "id", "n", "k", "i", "d")


@dataclass(frozen=True, slots=True)
class PopRecord:
    """One message in flight for a group: where it is, how often delivered, until when hidden."""

    group: str
    topic: str
    queue_id: int
    offset: int
    msg_id: str
    attempts: int
    token: str
    invisible_ms: int
    #: when it becomes visible again, ms since the epoch; 0: visible now
    deadline_ms: int


def _record(item: Any, path: Path) -> PopRecord:
    try:
        g, t, q, o, msg_id, n, k, i, d = (item[key] for key in _KEYS)
        return PopRecord(str(g), str(t), int(q), int(o), str(msg_id), int(n), str(k), int(i),
                         int(d))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: not an in-flight message record: {item!r} ({exc}); "
                         "delete the file to redeliver from the committed offsets") from exc


def load_records(path: Path) -> list[PopRecord]:
    """The records saved in ``path``; none when it does not exist."""
    data = load_json(path)
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of in-flight messages")
    return [_record(item, path) for item in data]


def save_records(path: Path, records: list[PopRecord]) -> bool:
    """Replace ``path`` with ``records``; False (logged, old file kept) on an OSError."""
    return save_json(path, [dict(zip(_KEYS, astuple(r), strict=True)) for r in records])


def stored_message(broker: Broker, record: PopRecord) -> DeliveredMessage | None:
    """The message ``record`` names, read from the store; ``None`` (logged) when it is gone."""
    try:
        response = broker.pull(PullQuery(
            group=record.group, topic=record.topic, queue_id=record.queue_id,
            offset=record.offset, max_messages=1, tag_expr="*"))
    except BrokerError as exc:
        log.warning("in-flight message %s of %s not restored: %s", record.msg_id, record.group,
                    exc)
        return None
    for message in response.messages:
        if message.queue_offset == record.offset and message.msg_id == record.msg_id:
            return message
    log.warning("in-flight message %s of %s is no longer stored at %s/%d offset %d",
                record.msg_id, record.group, record.topic, record.queue_id, record.offset)
    return None
