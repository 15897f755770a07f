"""Storage test helpers: tiny files, so segments and queue files roll over often."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_lite.storage import MessageStore, MessageToStore, StoreConfig

#: the ``open_store`` fixture: ``open_store(**config_overrides)`` opens a MessageStore
Opener = Callable[..., MessageStore]


def tiny_config(data_dir: Path, **overrides: Any) -> StoreConfig:
    values: dict[str, Any] = dict(
        data_dir=data_dir, segment_size=4096, max_message_size=2048,
        units_per_queue_file=16, index_slots=32, index_entries=64,
        flush_interval=0.05, checkpoint_interval=0.05,
    )
    values.update(overrides)
    return StoreConfig(**values)


def body_for(seq: int) -> bytes:
    return (b"%06d|" % seq) * (1 + seq % 40)


def message_for(seq: int, topic: str = "Orders", queues: int = 3) -> MessageToStore:
    return MessageToStore(
        topic=topic, body=body_for(seq), queue_id=seq % queues,
        properties={"TAGS": "even" if seq % 2 == 0 else "odd", "KEYS": f"k{seq} shared",
                    "UNIQ_KEY": f"u{seq}"},
    )
