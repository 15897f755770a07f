"""The relay: committed status rows become committed broker messages.

One pass (:meth:`Relay.run_once`):

1. **Claim** up to ``batch_size`` due rows in a short transaction
   (``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has one writer), setting
   ``claimed_by`` and a lease ``claimed_until``. The transaction commits
   before any network I/O, so no lock is held while the broker is called.
2. **Send halves** for all claimed rows in one request (``UNIQ_KEY = tx_id``),
   then **end** them in one request with each row's state.
3. **Record** offsets and ``relayed_at`` on success; on failure count the
   attempt, schedule the next one with exponential backoff and jitter, and
   park the row after ``max_attempts``. Updates are fenced on ``claimed_by``,
   so a worker whose lease expired cannot overwrite the new owner's work.

Relaying is idempotent end to end: broker_lite answers a second half or a
second commit for the same ``tx_id`` as the first, so a retried or raced
relay never makes a duplicate.

Per message group, rows go in ``seq`` (commit) order: a grouped row is
claimed only together with every unrelayed row of its group before it, a
failure holds back the rest of its group in that pass, and a parked row
blocks only its own group.
"""

from __future__ import annotations

import logging
import os
import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, false, or_, select, update

from outbox.config import Outbox
from outbox.errors import RelayError
from outbox.models import transaction_table as t
from outbox.publisher import HalfSent, OutgoingMessage, Publisher

__all__ = ["Relay", "RelayReport", "backoff_seconds", "worker_id"]

log = logging.getLogger("rocketbox.relay")


def worker_id() -> str:
    """``host:pid``, what ``claimed_by`` says."""
    return f"{socket.gethostname()}:{os.getpid()}"


def backoff_seconds(attempts: int, base: float, cap: float, jitter: float,
                    rng: random.Random | None = None) -> float:
    """Exponential backoff with +-``jitter`` proportional noise."""
    delay: float = min(cap, base * 2.0 ** max(0, attempts - 1))
    spread = delay * jitter
    noise: float = (rng or random.Random()).uniform(-spread, spread)
    return max(0.0, delay + noise)


@dataclass
class RelayReport:
    claimed: int = 0
    relayed: int = 0
    failed: int = 0
    parked: int = 0
    held_back: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Row:
    tx_id: str
    seq: int
    topic: str
    tag: str | None
    keys: str | None
    message_group: str | None
    body: bytes
    headers: dict[str, Any] | None
    state: str
    attempts: int
    half_offset: int | None
    created_at: datetime


_ROW_COLUMNS = (t.c.tx_id, t.c.seq, t.c.topic, t.c.tag, t.c["keys"], t.c.message_group, t.c.body,
                t.c.headers, t.c.state, t.c.attempts, t.c.half_offset, t.c.created_at)


class Relay:
    """Relays due rows of one outbox through a :class:`Publisher`."""

    def __init__(self, outbox: Outbox, publisher: Publisher, *, name: str | None = None) -> None:
        self.outbox = outbox
        self.publisher = publisher
        self.name = name or worker_id()
        self.settings = outbox.relay

    # -- 1. claim ------------------------------------------------------------

    def claim(self, limit: int | None = None, *, only: Sequence[str] | None = None,
              older_than: float | None = None) -> list[_Row]:
        """Claim due rows; ``older_than`` (seconds) keeps only rows committed that long ago."""
        limit = limit or self.settings.batch_size
        now = datetime.now(UTC)
        with self.outbox.engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                # Take SQLite's write lock before reading: two claims that both read
                # first would pick the same rows, or deadlock upgrading their locks.
                conn.execute(update(t).where(false()).values(claimed_by=t.c.claimed_by))
            # ``NOT parked`` (not ``parked IS false``) matches the partial index's WHERE
            due = and_(t.c.relayed_at.is_(None), ~t.c.parked,
                       t.c.next_attempt_at <= now,
                       or_(t.c.claimed_until.is_(None), t.c.claimed_until < now))
            # the due rows are read whole and locked in one statement, then marked
            # claimed in a second: two round trips per pass
            query = select(*_ROW_COLUMNS).where(due)
            if only:
                query = query.where(t.c.tx_id.in_(list(only)))
            if older_than is not None:
                query = query.where(t.c.created_at <= now - timedelta(seconds=older_than))
            query = query.order_by(t.c.seq).limit(limit)
            if conn.dialect.name == "postgresql":
                query = query.with_for_update(skip_locked=True)
            candidates = conn.execute(query).all()
            chosen = self._in_group_order(conn, [(r.tx_id, r.message_group, r.seq)
                                                 for r in candidates])
            if not chosen:
                return []
            conn.execute(update(t).where(t.c.tx_id.in_(chosen)).values(
                claimed_by=self.name,
                claimed_until=now + timedelta(seconds=self.settings.lease_seconds)))
        keep = set(chosen)
        return [_Row(**dict(row._mapping)) for row in candidates if row.tx_id in keep]

    @staticmethod
    def _in_group_order(conn: Connection, candidates: list[tuple[str, str | None, int]]
                        ) -> list[str]:
        """Keep ungrouped rows, and grouped ones only as a run from their group's head."""
        groups = {g for _tx, g, _s in candidates if g is not None}
        if not groups:
            return [tx for tx, _g, _s in candidates]
        top = max(s for _tx, g, s in candidates if g is not None)
        pending: dict[str, list[int]] = {}
        for group, seq in conn.execute(
                select(t.c.message_group, t.c.seq)
                .where(t.c.relayed_at.is_(None), t.c.message_group.in_(groups), t.c.seq <= top)
                .order_by(t.c.seq)):
            pending.setdefault(group, []).append(seq)
        mine: dict[str, set[int]] = {}
        for _tx, group, seq in candidates:
            if group is not None:
                mine.setdefault(group, set()).add(seq)
        allowed: dict[str, int] = {}  # group -> the last seq of its unbroken run
        for group, seqs in pending.items():
            last = -1
            for seq in seqs:
                if seq not in mine.get(group, set()):
                    break
                last = seq
            allowed[group] = last
        return [tx for tx, g, s in candidates if g is None or s <= allowed.get(g, -1)]

    # -- 2 and 3. send, end, record ---------------------------------------------

    def run_once(self, *, only: Sequence[str] | None = None,
                 older_than: float | None = None) -> RelayReport:
        """Claim, relay and record one batch; returns what happened."""
        report = RelayReport()
        rows = self.claim(only=only, older_than=older_than)
        report.claimed = len(rows)
        if not rows:
            return report
        halves: dict[str, HalfSent] = {}
        try:
            self._send(rows, halves, report)
        except RelayError as exc:
            # The broker could not be reached at all: nothing is wrong with these rows,
            # so no attempt is counted (an outage never parks a row). Release the claims
            # for the next pass, and let the caller retry the pass.
            self._release(rows, halves, exc)
            raise
        return report

    def _send(self, rows: list[_Row], halves: dict[str, HalfSent], report: RelayReport) -> None:
        failed_groups: set[str] = set()
        need_half = [r for r in rows if r.half_offset is None]
        outcomes: dict[str, Exception | None] = {}
        for row, result in zip(need_half, self.publisher.send_halves(
                [self._outgoing(r) for r in need_half]), strict=True):
            if isinstance(result, Exception):
                outcomes[row.tx_id] = result
            else:
                halves[row.tx_id] = result
        ends: list[tuple[str, str, int, int]] = []
        for row in rows:
            if row.tx_id in outcomes or (row.message_group in failed_groups):
                if row.message_group is not None:
                    failed_groups.add(row.message_group)
                continue
            half = halves.get(row.tx_id)
            ends.append((row.tx_id, row.state,
                         half.half_offset if half else (row.half_offset or -1),
                         half.queue_offset if half else -1))
        commit_offsets: dict[str, int] = {}
        group_of = {row.tx_id: row.message_group for row in rows}
        for wave in _waves(ends, group_of):
            # a group whose end failed in an earlier wave sends nothing more this pass
            wave = [e for e in wave if group_of[e[0]] not in failed_groups]
            for (tx_id, *_rest), ended in zip(wave, self.publisher.end(wave), strict=True):
                if isinstance(ended, Exception):
                    outcomes[tx_id] = ended
                    group = group_of[tx_id]
                    if group is not None:
                        failed_groups.add(group)
                else:
                    outcomes[tx_id] = None
                    commit_offsets[tx_id] = ended.commit_offset
        self._record(rows, halves, commit_offsets, outcomes, report)
        _observe_relayed(rows, outcomes)

    def _release(self, rows: list[_Row], halves: dict[str, HalfSent], error: Exception) -> None:
        """Give the claims back after a whole-pass failure, keeping any half offsets."""
        log.warning("relay pass over %d row(s) failed: %s", len(rows), error)
        with self.outbox.engine.begin() as conn:
            for row in rows:
                half = halves.get(row.tx_id)
                conn.execute(update(t).where(t.c.tx_id == row.tx_id,
                                             t.c.claimed_by == self.name).values(
                    claimed_by=None, claimed_until=None, last_error=str(error)[:2000],
                    half_offset=half.half_offset if half else row.half_offset))

    def _outgoing(self, row: _Row) -> OutgoingMessage:
        properties = {str(k): str(v) for k, v in (row.headers or {}).items()}
        return OutgoingMessage(tx_id=row.tx_id, topic=row.topic, body=row.body, tag=row.tag,
                               keys=tuple(row.keys.split()) if row.keys else (),
                               message_group=row.message_group, properties=properties)

    def _record(self, rows: list[_Row], halves: dict[str, HalfSent],
                commit_offsets: dict[str, int], outcomes: dict[str, Exception | None],
                report: RelayReport) -> None:
        now = datetime.now(UTC)
        mine = t.c.claimed_by == self.name
        held: list[dict[str, Any]] = []
        relayed: list[dict[str, Any]] = []
        with self.outbox.engine.begin() as conn:
            for row in rows:
                half = halves.get(row.tx_id)
                if row.tx_id not in outcomes:  # held back behind a failure in its group
                    report.held_back += 1
                    held.append({"b_tx": row.tx_id})
                    continue
                error = outcomes[row.tx_id]
                if error is None:
                    report.relayed += 1
                    relayed.append({"b_tx": row.tx_id,
                                    "b_half": half.half_offset if half else row.half_offset,
                                    "b_commit": commit_offsets.get(row.tx_id)})
                    continue
                attempts = row.attempts + 1
                parked = attempts >= self.settings.max_attempts
                report.failed += 1
                report.parked += int(parked)
                report.errors.append(f"{row.tx_id}: {error}")
                log.warning("relay of %s failed (attempt %d%s): %s", row.tx_id, attempts,
                            ", parked" if parked else "", error,
                            extra={"tx_id": row.tx_id, "attempt": attempts})
                delay = backoff_seconds(attempts, self.settings.backoff_base,
                                        self.settings.backoff_max, self.settings.jitter)
                conn.execute(update(t).where(and_(t.c.tx_id == row.tx_id, mine)).values(
                    attempts=attempts, parked=parked, last_error=str(error)[:2000],
                    next_attempt_at=now + timedelta(seconds=delay),
                    claimed_by=None, claimed_until=None,
                    half_offset=half.half_offset if half else row.half_offset))
            # one executemany each (psycopg pipelines it: one round trip, not one per row)
            fence = and_(t.c.tx_id == bindparam("b_tx"), mine)
            if held:
                conn.execute(update(t).where(fence).values(claimed_by=None,
                                                           claimed_until=None), held)
            if relayed:
                conn.execute(update(t).where(fence).values(
                    relayed_at=now, claimed_by=None, claimed_until=None, last_error=None,
                    half_offset=bindparam("b_half"), commit_offset=bindparam("b_commit")),
                    relayed)

    def drain(self, *, max_passes: int = 1000) -> RelayReport:
        """Run passes until nothing is due (or ``max_passes``); sums the reports."""
        total = RelayReport()
        for _ in range(max_passes):
            report = self.run_once()
            for name in ("claimed", "relayed", "failed", "parked", "held_back"):
                setattr(total, name, getattr(total, name) + getattr(report, name))
            total.errors.extend(report.errors)
            if report.claimed == 0 or report.relayed == 0:
                break
        return total


def _waves(ends: list[tuple[str, str, int, int]], group_of: dict[str, str | None]
           ) -> list[list[tuple[str, str, int, int]]]:
    """Split ends so each request holds at most one row per message group.

    Wave ``i`` has the ``i``-th row of every group (ungrouped rows all go in
    the first), so a failed end can hold back the rest of its group before any
    later row of that group is committed: per-group order survives a failure
    in the middle of a batch.
    """
    waves: list[list[tuple[str, str, int, int]]] = []
    depth: dict[str, int] = {}
    for end in ends:
        group = group_of[end[0]]
        index = 0
        if group is not None:
            index = depth.get(group, 0)
            depth[group] = index + 1
        while len(waves) <= index:
            waves.append([])
        waves[index].append(end)
    return waves


def _observe_relayed(rows: list[_Row], outcomes: dict[str, Exception | None]) -> None:
    """Commit-to-relayed latency for the Prometheus histogram, when metrics are installed."""
    try:
        from outbox.metrics import observe_relayed
    except ImportError:  # pragma: no cover - the metrics module ships with the package
        return
    now = datetime.now(UTC)
    for row in rows:
        if row.tx_id in outcomes and outcomes[row.tx_id] is None:
            created = row.created_at if row.created_at.tzinfo else row.created_at.replace(
                tzinfo=UTC)
            observe_relayed(created, now)
