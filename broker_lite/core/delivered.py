"""A stored record as consumers (and check-back listeners) see it."""

from __future__ import annotations

from broker_lite.core.model import DeliveredMessage
from broker_lite.storage import StoredRecord
from broker_lite.storage.properties import TAGS, UNIQ_KEY

__all__ = ["delivered_view"]


def delivered_view(record: StoredRecord, *, topic: str | None = None,
                   queue_id: int | None = None) -> DeliveredMessage:
    """``record`` as it is delivered: on ``topic``/``queue_id`` when given (a half's
    real topic and queue), else where it is stored."""
    props = record.properties
    keys = props.get("KEYS")
    return DeliveredMessage(
        msg_id=props.get(UNIQ_KEY, ""),
        topic=record.topic if topic is None else topic,
        queue_id=record.queue_id if queue_id is None else queue_id,
        queue_offset=record.queue_offset,
        commit_log_offset=record.physical_offset,
        body=record.body,
        tags=props.get(TAGS),
        keys=keys.split(" ") if keys else [],
        properties=props,
        born_timestamp=record.born_timestamp,
        store_timestamp=record.store_timestamp,
        reconsume_times=record.reconsume_times,
    )
