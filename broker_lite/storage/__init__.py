"""broker_lite's storage layer: CommitLog, ConsumeQueue, key index, checkpoint, recovery.

No sockets and no asyncio here; only files. The layout follows RocketMQ's
``store`` module so its documentation maps onto this code.
"""

from __future__ import annotations

from broker_lite.storage.commitlog import CommitLog, Corruption
from broker_lite.storage.config import StoreConfig
from broker_lite.storage.consume_queue import ConsumeQueue, QueueUnit
from broker_lite.storage.record import StoredRecord, SysFlag, TxType, sysflag_name, tag_hash
from broker_lite.storage.store import (
    MessageStore,
    MessageToStore,
    PutResult,
    RecoveryReport,
    RetentionReport,
    validate_topic,
)

__all__ = [
    "CommitLog",
    "ConsumeQueue",
    "Corruption",
    "MessageStore",
    "MessageToStore",
    "PutResult",
    "QueueUnit",
    "RecoveryReport",
    "RetentionReport",
    "StoreConfig",
    "StoredRecord",
    "SysFlag",
    "TxType",
    "sysflag_name",
    "tag_hash",
    "validate_topic",
]
