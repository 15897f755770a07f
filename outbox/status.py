"""What the outbox is doing: backlog, oldest pending row, parked rows, recent relays.

:func:`read_status` answers from the status table alone, per topic:

* **pending**: rows not relayed yet and not parked (the relay's backlog),
  of which **in_flight** are claimed by a relay worker right now;
* **oldest pending age**: seconds since the oldest pending row was written,
  the number to alert on (it grows when the relay or the broker is stuck);
* **parked**: rows that used up their attempts and wait for ``rocketbox
  replay``; the newest ones are listed with their ``last_error``;
* **relayed in the last hour** (``include_recent``; this one reads every
  row relayed recently, so the metrics collector leaves it out);
* **last errors, grouped**: each distinct ``last_error`` of the rows not
  relayed yet (pending ones that failed and wait for their next attempt, and
  parked ones), with how many rows and which topics carry it, most rows first:
  why the backlog does not move;
* **brokers the relay cannot reach**, and since when
  (:mod:`outbox.broker_health`): an outage, as opposed to rows refused. The
  relay refreshes that mark every 30 s while the outage lasts and clears it
  when it reaches the broker; a mark nobody refreshed for longer than
  :data:`STALE_AFTER` is shown as stale evidence (its relay may be gone, or
  run against another broker now), with its age.

The pending and parked queries match the predicates of the partial indexes
in :mod:`outbox.models`, so they stay cheap however many relayed rows the
table keeps. :mod:`outbox.status_render` draws the result as Rich tables; this
module imports no Rich, so the metrics collector and the console read the
status without loading a terminal renderer.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, and_, case, func, select

from outbox.broker_health import BrokerState, read_broker_states
from outbox.models import aware
from outbox.models import transaction_table as t

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "PARKED",
    "PENDING",
    "STALE_AFTER",
    "ErrorGroup",
    "OutboxStatus",
    "ParkedRow",
    "TopicStatus",
    "aware",
    "format_age",
    "read_status",
]

#: unrelayed, unparked: the predicate of ``ix_rocketbox_transaction_pending``, written
#: ``NOT parked`` (PostgreSQL cannot match ``parked IS false`` to that index)
PENDING = and_(t.c.relayed_at.is_(None), ~t.c.parked)
#: parked rows are never relayed; ``relayed_at IS NULL`` lets the group index serve
PARKED = and_(t.c.relayed_at.is_(None), t.c.parked)
#: a broker mark not refreshed for this long is old evidence (a relay refreshes it every 30 s)
STALE_AFTER = timedelta(seconds=90)
#: how many error groups ``read_status`` returns, and how much of each error text
ERROR_GROUPS = 10
ERROR_TEXT = 300


@dataclass(frozen=True, slots=True)
class TopicStatus:
    """One topic's numbers."""

    topic: str
    pending: int = 0
    in_flight: int = 0
    oldest_pending_age: float | None = None
    parked: int = 0
    relayed_last_hour: int | None = None


@dataclass(frozen=True, slots=True)
class ParkedRow:
    """A parked row, as ``rocketbox status`` lists it."""

    tx_id: str
    topic: str
    attempts: int
    created_at: datetime
    last_error: str | None


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    """One distinct ``last_error`` of unrelayed rows: how many pending and parked rows carry
    it, on which topics, and the newest row's write time."""

    error: str
    pending: int
    parked: int
    topics: tuple[str, ...]
    newest: datetime

    @property
    def rows(self) -> int:
        return self.pending + self.parked


@dataclass(frozen=True, slots=True)
class OutboxStatus:
    """The whole answer: per-topic numbers, the newest parked rows, and when it was read."""

    generated_at: datetime
    topics: tuple[TopicStatus, ...]
    parked_rows: tuple[ParkedRow, ...]
    unreachable: tuple[BrokerState, ...] = ()
    errors: tuple[ErrorGroup, ...] = ()

    def is_stale(self, state: BrokerState) -> bool:
        """Whether no relay has refreshed ``state`` for longer than :data:`STALE_AFTER`."""
        return self.generated_at - state.updated_at > STALE_AFTER

    @property
    def pending(self) -> int:
        return sum(s.pending for s in self.topics)

    @property
    def parked(self) -> int:
        return sum(s.parked for s in self.topics)

    @property
    def oldest_pending_age(self) -> float | None:
        ages = [s.oldest_pending_age for s in self.topics if s.oldest_pending_age is not None]
        return max(ages) if ages else None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able data (what ``rocketbox status --json`` prints)."""
        recent = [s.relayed_last_hour for s in self.topics if s.relayed_last_hour is not None]
        return {
            "generated_at": self.generated_at.isoformat(),
            "totals": {
                "pending": self.pending,
                "in_flight": sum(s.in_flight for s in self.topics),
                "oldest_pending_age_seconds": _round(self.oldest_pending_age),
                "parked": self.parked,
                "relayed_last_hour": sum(recent) if recent else None,
            },
            "topics": [
                {"topic": s.topic, "pending": s.pending, "in_flight": s.in_flight,
                 "oldest_pending_age_seconds": _round(s.oldest_pending_age),
                 "parked": s.parked, "relayed_last_hour": s.relayed_last_hour}
                for s in self.topics
            ],
            "parked_rows": [
                {"tx_id": r.tx_id, "topic": r.topic, "attempts": r.attempts,
                 "created_at": r.created_at.isoformat(), "last_error": r.last_error}
                for r in self.parked_rows
            ],
            "errors": [
                {"error": e.error, "rows": e.rows, "pending": e.pending, "parked": e.parked,
                 "topics": list(e.topics), "newest": e.newest.isoformat()}
                for e in self.errors
            ],
            "brokers_unreachable": [
                {"broker": u.broker, "since": u.unreachable_since.isoformat(),
                 "last_error": u.last_error, "updated_at": u.updated_at.isoformat(),
                 "evidence_age_seconds": _round(
                     (self.generated_at - u.updated_at).total_seconds()),
                 "reported_by": u.reported_by, "stale": self.is_stale(u)}
                for u in self.unreachable
            ],
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def read_status(db: Engine | Connection, *, parked_limit: int = 20, include_recent: bool = True,
                now: datetime | None = None) -> OutboxStatus:
    """Read the status table once (a few indexed queries) and summarise it per topic."""
    now = now or datetime.now(UTC)
    if isinstance(db, Engine):
        with db.connect() as conn:
            return read_status(conn, parked_limit=parked_limit,
                               include_recent=include_recent, now=now)
    conn = db
    topics: dict[str, dict[str, Any]] = {}

    def entry(topic: str) -> dict[str, Any]:
        return topics.setdefault(topic, {"topic": topic})

    in_flight = func.sum(case((t.c.claimed_until > now, 1), else_=0))
    for topic, count, busy, oldest in conn.execute(
            select(t.c.topic, func.count(), in_flight, func.min(t.c.created_at))
            .where(PENDING).group_by(t.c.topic)):
        item = entry(topic)
        item["pending"] = int(count)
        item["in_flight"] = int(busy or 0)
        if oldest is not None:
            item["oldest_pending_age"] = max(0.0, (now - aware(oldest)).total_seconds())
    for topic, count in conn.execute(
            select(t.c.topic, func.count()).where(PARKED).group_by(t.c.topic)):
        entry(topic)["parked"] = int(count)
    if include_recent:
        for item in topics.values():
            item["relayed_last_hour"] = 0
        for topic, count in conn.execute(
                select(t.c.topic, func.count())
                .where(t.c.relayed_at >= now - timedelta(hours=1)).group_by(t.c.topic)):
            entry(topic)["relayed_last_hour"] = int(count)
    parked_rows: list[ParkedRow] = []
    if parked_limit > 0:
        for tx_id, topic, attempts, created_at, last_error in conn.execute(
                select(t.c.tx_id, t.c.topic, t.c.attempts, t.c.created_at, t.c.last_error)
                .where(PARKED).order_by(t.c.created_at.desc()).limit(parked_limit)):
            parked_rows.append(ParkedRow(tx_id, topic, int(attempts), aware(created_at),
                                         last_error))
    return OutboxStatus(
        generated_at=now,
        topics=tuple(TopicStatus(**topics[name]) for name in sorted(topics)),
        parked_rows=tuple(parked_rows),
        unreachable=tuple(read_broker_states(conn)),
        errors=_error_groups(conn),
    )


def _error_groups(conn: Connection) -> tuple[ErrorGroup, ...]:
    """Each distinct ``last_error`` of pending and of parked rows (two queries, each on the
    predicate of its partial index), merged and ordered by rows, most first."""
    groups: dict[str, dict[str, Any]] = {}
    for predicate, kind in ((PENDING, "pending"), (PARKED, "parked")):
        for error, topic, count, newest in conn.execute(
                select(t.c.last_error, t.c.topic, func.count(), func.max(t.c.created_at))
                .where(predicate, t.c.last_error.is_not(None))
                .group_by(t.c.last_error, t.c.topic)):
            text = " ".join(str(error).split())[:ERROR_TEXT]
            group = groups.setdefault(text, {"pending": 0, "parked": 0, "topics": set(),
                                             "newest": aware(newest)})
            group[kind] += int(count)
            group["topics"].add(topic)
            group["newest"] = max(group["newest"], aware(newest))
    ordered = sorted(groups.items(), key=lambda item: (-(item[1]["pending"]
                                                         + item[1]["parked"]), item[0]))
    return tuple(ErrorGroup(error=text, pending=g["pending"], parked=g["parked"],
                            topics=tuple(sorted(g["topics"])), newest=g["newest"])
                 for text, g in ordered[:ERROR_GROUPS])


def format_age(seconds: float | None) -> str:
    """Seconds as a short age: ``4.2s``, ``3.1m``, ``2.0h``, ``1.5d``; ``-`` for none."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def __getattr__(name: str) -> Callable[[OutboxStatus, Console], None]:
    """``render_status`` moved to :mod:`outbox.status_render`; the old name still works."""
    if name == "render_status":
        warnings.warn("outbox.status.render_status moved to outbox.status_render.render_status",
                      DeprecationWarning, stacklevel=2)
        renderer: Callable[[OutboxStatus, Console], None] = getattr(
            importlib.import_module("outbox.status_render"), name)
        return renderer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
