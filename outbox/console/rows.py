"""The outbox tables as the console reads them: filtered row lists, one row, its inbox rows.

Lists are capped (``limit``) and ordered newest first; the state filters use
the same predicates as ``rocketbox status``, so they ride its partial indexes.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Engine, select, true

from outbox.models import aware, inbox_table
from outbox.models import transaction_table as t
from outbox.status import PARKED, PENDING

__all__ = ["ROW_STATES", "RowFilter", "body_views", "inbox_rows", "list_rows", "one_row",
           "row_state"]

#: the states the rows page filters by
ROW_STATES = ("pending", "parked", "relayed", "all")


@dataclass(frozen=True, slots=True)
class RowFilter:
    """What the rows page asks for (every field optional but ``state``)."""

    state: str = "all"
    topic: str | None = None
    #: only rows written at least this many seconds ago
    older_than: float | None = None
    #: only rows whose last error contains this text
    error: str | None = None
    limit: int = 100

    def __post_init__(self) -> None:
        if self.state not in ROW_STATES:
            raise ValueError(f"state must be one of {', '.join(ROW_STATES)}, got {self.state!r}")
        if self.older_than is not None and self.older_than < 0:
            raise ValueError(f"older_than must be >= 0 seconds, got {self.older_than}")
        if not 1 <= self.limit <= 1000:
            raise ValueError(f"limit must be 1..1000, got {self.limit}")


def _predicate(state: str) -> ColumnElement[bool]:
    if state == "pending":
        return PENDING
    if state == "parked":
        return PARKED
    if state == "relayed":
        return t.c.relayed_at.is_not(None)
    return true()


def row_state(row: Any) -> str:
    if row.relayed_at is not None:
        return "relayed"
    return "parked" if row.parked else "pending"


def list_rows(engine: Engine, wanted: RowFilter, *,
              now: datetime | None = None) -> list[dict[str, Any]]:
    """Rows matching ``wanted``, newest first, without their bodies."""
    now = now or datetime.now(UTC)
    query = (select(t.c.tx_id, t.c.topic, t.c.tag, t.c["keys"], t.c.created_at, t.c.attempts,
                    t.c.last_error, t.c.relayed_at, t.c.parked, t.c.next_attempt_at)
             .where(_predicate(wanted.state)))
    if wanted.topic:
        query = query.where(t.c.topic == wanted.topic)
    if wanted.older_than is not None:
        query = query.where(t.c.created_at <= now - timedelta(seconds=wanted.older_than))
    if wanted.error:
        query = query.where(t.c.last_error.contains(wanted.error, autoescape=True))
    query = query.order_by(t.c.created_at.desc()).limit(wanted.limit)
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [{"tx_id": r.tx_id, "topic": r.topic, "tag": r.tag, "keys": r.keys,
             "created_at": aware(r.created_at),
             "age": max(0.0, (now - aware(r.created_at)).total_seconds()),
             "attempts": r.attempts, "last_error": r.last_error, "state": row_state(r),
             "relayed_at": aware(r.relayed_at) if r.relayed_at else None}
            for r in rows]


def one_row(engine: Engine, tx_id: str) -> dict[str, Any] | None:
    """Every column of one row (datetimes as UTC), or ``None``."""
    with engine.connect() as conn:
        row = conn.execute(select(t).where(t.c.tx_id == tx_id)).first()
    if row is None:
        return None
    data = dict(row._mapping)
    for key, value in data.items():
        if isinstance(value, datetime):
            data[key] = aware(value)
    data["state_name"] = row_state(row)
    return data


def inbox_rows(engine: Engine, tx_id: str) -> list[dict[str, Any]]:
    """The consumer groups that processed ``tx_id`` (their inbox rows)."""
    with engine.connect() as conn:
        rows = conn.execute(select(inbox_table.c.consumer_group, inbox_table.c.processed_at)
                            .where(inbox_table.c.tx_id == tx_id)
                            .order_by(inbox_table.c.processed_at)).all()
    return [{"group": g, "processed_at": aware(at)} for g, at in rows]


def body_views(body: bytes) -> dict[str, str]:
    """The body as pretty JSON (when it is JSON) and as text (UTF-8, bad bytes replaced)."""
    text = body.decode("utf-8", errors="replace")
    views = {"text": text}
    with contextlib.suppress(ValueError):
        views["json"] = json.dumps(json.loads(body), indent=2, ensure_ascii=False,
                                   sort_keys=True)
    return views
