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
* **brokers the relay cannot reach**, and since when
  (:mod:`outbox.broker_health`): an outage, as opposed to rows refused.

The pending and parked queries match the predicates of the partial indexes
in :mod:`outbox.models`, so they stay cheap however many relayed rows the
table keeps. :func:`render_status` draws the result as rich tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from sqlalchemy import Connection, Engine, and_, case, func, select

from outbox.broker_health import BrokerState, read_broker_states
from outbox.models import aware
from outbox.models import transaction_table as t

__all__ = [
    "PARKED",
    "PENDING",
    "OutboxStatus",
    "ParkedRow",
    "TopicStatus",
    "aware",
    "format_age",
    "read_status",
    "render_status",
]

#: unrelayed, unparked: the predicate of ``ix_rocketbox_transaction_pending``, written
#: ``NOT parked`` (PostgreSQL cannot match ``parked IS false`` to that index)
PENDING = and_(t.c.relayed_at.is_(None), ~t.c.parked)
#: parked rows are never relayed; ``relayed_at IS NULL`` lets the group index serve
PARKED = and_(t.c.relayed_at.is_(None), t.c.parked)


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
class OutboxStatus:
    """The whole answer: per-topic numbers, the newest parked rows, and when it was read."""

    generated_at: datetime
    topics: tuple[TopicStatus, ...]
    parked_rows: tuple[ParkedRow, ...]
    unreachable: tuple[BrokerState, ...] = ()

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
            "brokers_unreachable": [
                {"broker": u.broker, "since": u.unreachable_since.isoformat(),
                 "last_error": u.last_error, "updated_at": u.updated_at.isoformat()}
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
    )


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


def render_status(status: OutboxStatus, console: Console) -> None:
    """Draw the per-topic table and, when there are parked rows, their errors."""
    table = Table(title=f"rocketbox outbox at {status.generated_at:%Y-%m-%d %H:%M:%S %Z}")
    table.add_column("topic")
    for name in ("pending", "in flight", "oldest pending", "parked", "relayed (1h)"):
        table.add_column(name, justify="right")
    for s in status.topics:
        table.add_row(
            s.topic, str(s.pending), str(s.in_flight), format_age(s.oldest_pending_age),
            f"[red]{s.parked}[/red]" if s.parked else "0",
            "-" if s.relayed_last_hour is None else str(s.relayed_last_hour))
    if not status.topics:
        table.add_row("(no rows)", "0", "0", "-", "0", "-")
    elif len(status.topics) > 1:
        recent = [s.relayed_last_hour for s in status.topics if s.relayed_last_hour is not None]
        table.add_section()
        table.add_row("[b]all[/b]", str(status.pending),
                      str(sum(s.in_flight for s in status.topics)),
                      format_age(status.oldest_pending_age), str(status.parked),
                      str(sum(recent)) if recent else "-")
    console.print(table)
    for u in status.unreachable:
        console.print(Text.assemble(
            ("broker unreachable since ", "bold red"),
            (f"{u.unreachable_since:%Y-%m-%d %H:%M:%S %Z}", "bold red"),
            f" ({format_age((status.generated_at - u.unreachable_since).total_seconds())} ago): "
            f"{u.broker}; the relay retries with backoff. Last error: {u.last_error or '-'}"))
    if status.parked_rows:
        _render_parked(status, console)


def _render_parked(status: OutboxStatus, console: Console) -> None:
    """One block per parked row: its facts on a line, its last error below at full width.

    An error is a sentence; as a table column squeezed next to a 32-digit
    tx_id it wrapped one word per line at 80 columns.
    """
    console.print(f"[b]parked rows[/b] (newest {len(status.parked_rows)} of {status.parked}; "
                  f"`rocketbox replay` re-queues them)")
    for r in status.parked_rows:
        line = Text.assemble((r.tx_id, "bold"), f"  {r.topic}  attempts={r.attempts}  "
                             f"written {r.created_at:%Y-%m-%d %H:%M:%S}")
        console.print(line, overflow="fold")
        console.print(Padding(Text(r.last_error or "(no error recorded)", style="red"),
                              (0, 0, 0, 4)))
