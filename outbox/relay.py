"""The relay: committed status rows become committed broker messages.

One pass (:meth:`Relay.run_once`):

1. **Claim** up to ``batch_size`` due rows (:mod:`outbox.claims`): a short
   transaction marks them ``claimed_by`` with a lease ``claimed_until`` and
   commits before any network I/O; rows go in ``seq`` order.
2. **Send halves** for all claimed rows, then **end** them with each row's
   state, through a :class:`~outbox.targets.base.Publisher` (docs/targets.md:
   one outcome per row; broker_lite takes each step in one request).
3. **Record** offsets and ``relayed_at`` on success; on failure count the
   attempt, schedule the next one with exponential backoff and jitter, and
   park the row after ``max_attempts``; a row the broker left to its
   check-back is released without an attempt. Updates are fenced on ``claimed_by``,
   so a worker whose lease expired cannot overwrite the new owner's work.

Relaying is idempotent end to end: broker_lite answers a second half or a
second commit for the same ``tx_id`` as the first, so a retried or raced
relay never makes a duplicate.

Per message group, rows go in ``seq`` (commit) order: a grouped row is
claimed only together with every unrelayed row of its group before it, a
failure holds back the rest of its group in that pass, and a parked row
blocks only its own group.

:meth:`Relay.drain` (the sweeper) runs ``RelaySettings.drain_lanes`` loops
of passes at once; the lanes are racing relays in one process, kept apart by
the same claims.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from sqlalchemy import (
    and_,
    bindparam,
    update,
)

from outbox import broker_health
from outbox.claims import ClaimedRow, claim, pipeline_sql, run_pipelined
from outbox.config import Outbox
from outbox.errors import RelayError
from outbox.models import transaction_table as t
from outbox.relay_ends import STATES, Ended, outgoing, recorded_half, waves
from outbox.relay_records import (
    RECORD_PG,
    RECORD_PG_POSITIONS,
    encode_rows,
    psycopg_record,
    read_record,
)
from outbox.targets.base import (
    HalfStored,
    OutgoingMessage,
    Publisher,
    TxEnd,
    relay_tuning,
)
from outbox.tracing import exported as tracing_exported
from outbox.tracing import record_relay_span, relay_span

__all__ = ["ReadPass", "Relay", "RelayReport", "backoff_seconds", "worker_id"]

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
    #: of ``relayed``, rows with a message group (their groups' next rows may be due now)
    relayed_grouped: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: RelayReport) -> None:
        """Add ``other``'s counts and errors to this report."""
        self.claimed += other.claimed
        self.relayed += other.relayed
        self.failed += other.failed
        self.parked += other.parked
        self.held_back += other.held_back
        self.relayed_grouped += other.relayed_grouped
        self.errors.extend(other.errors)


@dataclass(frozen=True, slots=True)
class ReadPass:
    """What :meth:`Relay.relay_read` did: its report, and whether some of its rows are still
    due (a claiming pass takes them)."""

    report: RelayReport
    left_due: bool
    #: the record, not yet written (``relay_read(..., hold_record=True)``): its SQL for
    #: psycopg 3 and its parameters (:func:`outbox.notified.read_due` sends it)
    record: tuple[str, dict[str, Any]] | None = None


class Relay:
    """Relays due rows of one outbox through a :class:`Publisher`."""

    def __init__(self, outbox: Outbox, publisher: Publisher, *, name: str | None = None,
                 seen_topics: set[str] | None = None) -> None:
        self.outbox = outbox
        self.publisher = publisher
        self.name = name or worker_id()
        #: the outbox's relay settings, with the target's own defaults for what the user
        #: left unset (RelayTuning: NATS claims bigger batches in more lanes)
        self.settings = outbox.relay.tuned(**msgspec.structs.asdict(relay_tuning(publisher)))
        #: topics relayed to (or tried) so far; a new one is logged once. Relays made one
        #: after another by one worker share theirs (``seen_topics=``): once per worker.
        self.seen_topics: set[str] = set() if seen_topics is None else seen_topics

    # -- 1. claim ------------------------------------------------------------

    def claim(self, limit: int | None = None, *, only: Sequence[str] | None = None,
              older_than: float | None = None) -> list[ClaimedRow]:
        """Claim due rows under this relay's name (:func:`outbox.claims.claim`)."""
        return claim(self.outbox, self.name, limit or int(self.settings.batch_size), only=only,
                     older_than=older_than)

    # -- 2 and 3. send, end, record ---------------------------------------------

    def run_once(self, *, only: Sequence[str] | None = None,
                 older_than: float | None = None) -> RelayReport:
        """Claim, relay and record one batch; returns what happened."""
        report = RelayReport()
        started = time.time_ns()
        rows = self.claim(only=only, older_than=older_than)
        report.claimed = len(rows)
        if not rows:
            return report
        # the trace contexts (outbox.tracing), read only when spans are exported
        trace = tracing_exported()
        headers = [row.headers for row in rows] if trace else []
        halves: dict[str, HalfStored] = {}
        with relay_span("", headers, start_time=started,
                        attributes={"messaging.batch.message_count": len(rows)}):
            record_relay_span("claim", headers, start_time=started)
            try:
                self._send(rows, halves, report, trace)
            except RelayError as exc:
                # The broker could not be reached at all: nothing is wrong with these rows,
                # so no attempt is counted (an outage never parks a row). Release the
                # claims for the next pass, and let the caller retry the pass.
                self._release(rows, halves, exc)
                broker_health.pass_failed(self.outbox, exc)  # `rocketbox status` shows it
                raise
        broker_health.pass_went_through(self.outbox)
        return report

    def can_relay_read(self) -> bool:
        """Whether rows can go unclaimed (:meth:`relay_read`): the target sends a pass in
        one round trip and keeps one half and one commit per ``tx_id``, so a row two
        relays send at once is still one message."""
        target = getattr(self.publisher, "target", None)
        return bool(getattr(target, "halves_deduplicated", False)) \
            and getattr(self.publisher, "send_and_end", None) is not None

    def relay_read(self, rows: list[ClaimedRow], *, hold_record: bool = False) -> ReadPass:
        """Relay ungrouped rows read without a claim (:mod:`outbox.notified`) in one round
        trip, and record those relayed, fenced on no live claim; the rest, and every row
        when the target would not take the round trip, is left due for a claiming pass
        (which counts the attempt). Only where :meth:`can_relay_read`; raises
        :class:`RelayError` when the broker cannot be reached (nothing is written).
        ``hold_record``: the record is not written but handed back in the result (the
        leading listener sends it with its next read, :class:`ReadPass`)."""
        report = RelayReport()
        if not rows:
            return ReadPass(report, False)
        started = time.time_ns()
        trace = tracing_exported()
        headers = [row.headers for row in rows] if trace else []
        halves: dict[str, HalfStored] = {}
        ended = Ended()
        _note_new_topics(rows, self.seen_topics)
        with relay_span("", headers, start_time=started,
                        attributes={"messaging.batch.message_count": len(rows)}):
            try:
                sent = self._send_and_end(rows, rows, [outgoing(r) for r in rows], halves,
                                          ended, trace)
            except RelayError as exc:
                broker_health.pass_failed(self.outbox, exc)
                raise
            if not sent:
                return ReadPass(report, True)
            relayed = [r for r in rows if r.tx_id in ended.outcomes
                       and ended.outcomes[r.tx_id] is None]
            record = read_record(relayed, halves, ended) if relayed else None
            if record is not None and not hold_record:
                self._run_record(*record)
        broker_health.pass_went_through(self.outbox)
        _observe_relayed(relayed, ended.outcomes)
        report.relayed = len(relayed)
        held = psycopg_record(*record) if record is not None and hold_record else None
        return ReadPass(report, len(relayed) < len(rows), held)

    def _run_record(self, statement: Any, params: dict[str, Any]) -> None:
        """One record statement, planned for its values in one round trip through psycopg
        3 (:func:`outbox.claims.run_pipelined`), else in autocommit."""
        engine = self.outbox.engine
        compiled = pipeline_sql(engine.dialect, statement)
        if compiled is not None:
            run_pipelined(engine, compiled[0], {**compiled[1], **params})
        else:
            with engine.connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(statement, params)

    def _send(self, rows: list[ClaimedRow], halves: dict[str, HalfStored],
              report: RelayReport, trace: bool = False) -> None:
        """Halves, ends and the record of one pass. Per row it costs a few dict and list
        entries: at a backlog, a pass holds ``batch_size`` rows and this Python shares the
        cores with PostgreSQL and the broker (bench/relay.py, "floors")."""
        _note_new_topics(rows, self.seen_topics)
        ended = Ended()
        # a row with a recorded half never gets a second one (RocketMQ stores every half)
        need_half = [r for r in rows if r.half_offset is None and r.half_message_id is None]
        messages = [outgoing(r) for r in need_half]
        if not self._send_and_end(rows, need_half, messages, halves, ended, trace):
            self._half_then_end(rows, need_half, messages, halves, ended, trace)
        self._record(rows, halves, ended.commit_offsets, ended.outcomes, report, ended.positions)
        _observe_relayed(rows, ended.outcomes)

    def _send_and_end(self, rows: list[ClaimedRow], need_half: list[ClaimedRow],
                      messages: list[OutgoingMessage], halves: dict[str, HalfStored],
                      ended: Ended, trace: bool = False) -> bool:
        """A pass of ungrouped rows with no half yet, through a target that sends the halves
        and their ends in one round trip (:class:`~outbox.targets.base.PipelinedTarget`);
        False when it did not (the two-step way then runs). A traced pass records its
        ``half`` and ``end`` spans over that one round trip: both requests were in
        flight for all of it (attribute ``rocketbox.relay.one_round_trip``)."""
        both = getattr(self.publisher, "send_and_end", None)
        if both is None or len(need_half) != len(rows) or any(
                r.message_group is not None for r in rows):
            return False
        started = time.time_ns()
        states = [STATES.get(r.state, "UNKNOWN") for r in rows]
        results = both(messages, states)
        if results is None:
            return False
        if trace:
            headers = [r.headers for r in rows]
            for name in ("half", "end"):
                record_relay_span(name, headers, start_time=started,
                                  attributes={"rocketbox.relay.one_round_trip": True})
        for row, state, (half, end) in zip(rows, states, results, strict=True):
            if not isinstance(half, HalfStored):
                ended.outcomes[row.tx_id] = half
            else:
                halves[row.tx_id] = half
                if end is not None:
                    ended.take(TxEnd(half, state), end)
        return True

    def _half_then_end(self, rows: list[ClaimedRow], need_half: list[ClaimedRow],
                       messages: list[OutgoingMessage], halves: dict[str, HalfStored],
                       ended: Ended, trace: bool) -> None:
        """The halves of ``need_half`` (``messages``), their ids recorded where the target
        needs it, then the ends in waves (one per message group position)."""
        outcomes = ended.outcomes
        failed_groups = ended.failed_groups
        with relay_span("half", [r.headers for r in need_half] if trace else ()):
            sent = self.publisher.send_halves(messages)
        for row, result in zip(need_half, sent, strict=True):
            if isinstance(result, HalfStored):
                halves[row.tx_id] = result
            else:
                outcomes[row.tx_id] = result
        self._record_half_ids(halves)
        ends: list[TxEnd] = []
        for row in rows:
            tx_id = row.tx_id
            if tx_id in outcomes or (row.message_group in failed_groups):
                if row.message_group is not None:
                    failed_groups.add(row.message_group)
                continue
            half = halves.get(tx_id) or recorded_half(row)
            ends.append(TxEnd(half, STATES.get(row.state, "UNKNOWN")))
        # ungrouped rows (the common case) all go in one wave, and need no map of groups
        grouped = any(row.message_group is not None for row in rows)
        group_of = {row.tx_id: row.message_group for row in rows} if grouped else {}
        headers_of = {row.tx_id: row.headers for row in rows} if trace else {}
        for wave in waves(ends, group_of) if grouped else [ends] if ends else []:
            # a group whose end failed in an earlier wave sends nothing more this pass
            if failed_groups:
                wave = [e for e in wave if group_of.get(e.tx_id) not in failed_groups]
            with relay_span("end", [headers_of[e.tx_id] for e in wave] if trace else ()):
                results = self.publisher.end_transactions(wave)
            for end, answer in zip(wave, results, strict=True):
                if not ended.take(end, answer):
                    group = group_of.get(end.tx_id)
                    if group is not None:
                        failed_groups.add(group)

    def _record_half_ids(self, halves: dict[str, HalfStored]) -> None:
        """Write the ids of RocketMQ halves on their rows before any end is sent.

        A check-back commits only the half whose ids its row holds and rolls
        back any other half of the same ``tx_id`` (docs/rocketmq.md); fenced on
        the claim. broker_lite's halves are addressed by their offsets, which
        ``_record`` writes with the outcome, and broker_lite keeps one half per
        ``tx_id``: they cost no write here (this write was a fifth of the relay
        worker's time on broker_lite, bench/relay.py).
        """
        ids = [{"b_tx": h.tx_id, "b_msg": h.message_id, "b_txn": h.transaction_id}
               for h in halves.values() if h.message_id and h.half_offset < 0]
        if not ids:
            return
        with self.outbox.engine.begin() as conn:
            conn.execute(update(t).where(t.c.tx_id == bindparam("b_tx"),
                                         t.c.claimed_by == self.name).values(
                half_message_id=bindparam("b_msg"),
                half_transaction_id=bindparam("b_txn")), ids)

    def _release(self, rows: list[ClaimedRow], halves: dict[str, HalfStored],
                 error: Exception) -> None:
        """Give the claims back after a whole-pass failure, keeping any half offsets."""
        log.warning("relay pass over %d row(s) failed: %s", len(rows), error)
        with self.outbox.engine.begin() as conn:
            for row in rows:
                half = halves.get(row.tx_id)
                conn.execute(update(t).where(t.c.tx_id == row.tx_id,
                                             t.c.claimed_by == self.name).values(
                    claimed_by=None, claimed_until=None, last_error=str(error)[:2000],
                    half_offset=half.half_offset if half else row.half_offset))

    def _record(self, rows: list[ClaimedRow], halves: dict[str, HalfStored],
                commit_offsets: dict[str, int], outcomes: dict[str, Exception | None],
                report: RelayReport, positions: dict[str, str] | None = None) -> None:
        """Write each row's outcome, fenced on the claim; ``positions`` (tx_id: where the
        broker put it) go to ``broker_position``, written only when some row has one (a
        broker_lite or RocketMQ pass leaves the column alone)."""
        positions = positions or {}
        now = datetime.now(UTC)
        # every row relayed, on PostgreSQL (a backlog's every pass): the record is one
        # statement, built straight from the rows
        if self.outbox.engine.dialect.name == "postgresql" and len(outcomes) == len(rows) \
                and all(error is None for error in outcomes.values()):
            self._record_relayed(rows, halves, commit_offsets, report, positions, now)
            return
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
                    report.relayed_grouped += row.message_group is not None
                    relayed.append({"b_tx": row.tx_id,
                                    "b_half": half.half_offset if half else row.half_offset,
                                    "b_commit": commit_offsets.get(row.tx_id),
                                    "b_position": positions.get(row.tx_id)})
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
            if relayed and conn.dialect.name == "postgresql":
                # one UPDATE joined to the rows' JSON: less work for PostgreSQL and for
                # Python (no parameter set per row) than an executemany
                rows_json = encode_rows([(r["b_tx"], r["b_half"], r["b_commit"],
                                           r["b_position"]) for r in relayed]).decode()
                conn.execute(RECORD_PG_POSITIONS if positions else RECORD_PG,
                             {"b_me": self.name, "b_now": now, "b_rows": rows_json})
            elif relayed:
                extra: dict[str, Any] = ({"broker_position": bindparam("b_position")}
                                         if positions else {})
                conn.execute(update(t).where(fence).values(
                    relayed_at=now, claimed_by=None, claimed_until=None, last_error=None,
                    half_offset=bindparam("b_half"), commit_offset=bindparam("b_commit"),
                    **extra), relayed)

    def _record_relayed(self, rows: list[ClaimedRow], halves: dict[str, HalfStored],
                        commit_offsets: dict[str, int], report: RelayReport,
                        positions: dict[str, str], now: datetime) -> None:
        """Record a pass whose every row was relayed, on PostgreSQL: one ``UPDATE`` joined
        to the rows' arrays, fenced on the claim, as every record is. Through psycopg 3 it
        goes in one pipeline with its ``BEGIN``, ``COMMIT`` and a custom plan
        (:func:`outbox.claims.run_pipelined`: one round trip; once prepared, its generic
        plan got slower with every relayed row); otherwise in autocommit (one statement
        is atomic by itself, and separate ``BEGIN`` and ``COMMIT`` round trips were a
        third of a small pass's database time)."""
        relayed: list[tuple[Any, ...]] = [(tx_id := row.tx_id,
                    half.half_offset if (half := halves.get(tx_id)) else row.half_offset,
                    commit_offsets.get(tx_id)) for row in rows]
        if positions:
            relayed = [(*r, positions.get(r[0])) for r in relayed]
        params = {"b_me": self.name, "b_now": now,
                  "b_rows": encode_rows(relayed).decode()}
        self._run_record(RECORD_PG_POSITIONS if positions else RECORD_PG, params)
        report.relayed += len(rows)
        report.relayed_grouped += sum(row.message_group is not None for row in rows)

    def drain(self, *, max_passes: int = 1000, lanes: int | None = None,
              older_than: float | None = None) -> RelayReport:
        """Run passes until nothing is due (or ``max_passes`` in all); sums the reports.

        ``older_than`` (seconds) passes on to every claim: only rows committed
        that long ago (the sweeper leaves younger rows to their tasks).

        With ``lanes`` > 1, that many loops of passes run at once, on threads,
        each claiming under its own name (``<name>/<lane>``), so one lane's
        database statements overlap another's broker requests. Lanes are racing
        relays in one process: claims stay exclusive (``SKIP LOCKED`` and the
        lease), and a grouped row is claimed only together with every unrelayed
        row of its group before it, so no row is relayed twice and each group
        keeps its order. A lane stops when its claim comes back empty or it
        relayed nothing; an error in one lane stops the others and is raised.
        ``lanes`` defaults to ``RelaySettings.drain_lanes``; on SQLite (one
        writer) a drain always runs one lane.
        """
        if lanes is None:
            lanes = self.settings.drain_lanes
        if self.outbox.engine.dialect.name == "sqlite":
            lanes = 1
        total = RelayReport()
        budget = _Budget(max_passes)
        if lanes <= 1:
            self._lane(budget, total, threading.Event(), threading.Lock(), older_than)
            return total
        stop, lock = threading.Event(), threading.Lock()
        errors: list[BaseException] = []

        def run(relay: Relay) -> None:
            try:
                relay._lane(budget, total, stop, lock, older_than)
            except BaseException as exc:
                errors.append(exc)
                stop.set()

        others = [threading.Thread(target=run, name=f"rocketbox-drain-{lane}", daemon=True,
                                   args=(Relay(self.outbox, self.publisher,
                                               name=f"{self.name}/{lane}"[:255],
                                               seen_topics=self.seen_topics),))
                  for lane in range(1, lanes)]
        for thread in others:
            thread.start()
        run(self)
        for thread in others:
            thread.join()
        if errors:
            raise errors[0]
        return total

    def _lane(self, budget: _Budget, total: RelayReport, stop: threading.Event,
              lock: threading.Lock, older_than: float | None = None) -> None:
        while not stop.is_set() and budget.take():
            report = self.run_once(older_than=older_than)
            with lock:
                total.add(report)
            if report.claimed == 0 or report.relayed == 0:
                break


class _Budget:
    """The passes a drain may still run, shared by its lanes."""

    def __init__(self, passes: int) -> None:
        self._left = passes
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True


def _note_new_topics(rows: list[ClaimedRow], seen: set[str]) -> None:
    """Warn once for each topic not in ``seen`` (the relay's :attr:`Relay.seen_topics`).

    A typo in a topic name (``Oders``) is a new topic: on a broker that
    auto-creates topics it would silently become one. This line is the trace
    it leaves in the relay's log; ``broker-lite serve`` refuses unknown topics
    unless run with ``--auto-create-topics`` (docs/outbox.md).
    """
    for topic in {row.topic for row in rows} - seen:
        seen.add(topic)
        log.warning("relaying to topic %r for the first time in this process; if that name "
                    "is a typo, the broker refuses it (unless it auto-creates topics)", topic,
                    extra={"topic": topic})


def _observe_relayed(rows: list[ClaimedRow], outcomes: dict[str, Exception | None]) -> None:
    """Commit-to-relayed latency for the Prometheus histogram (:mod:`outbox.metrics`)."""
    from outbox.metrics import observe_relayed_many  # on first use: prometheus_client loads late

    # it makes SQLite's naive datetimes UTC
    observe_relayed_many([row.created_at for row in rows
                          if row.tx_id in outcomes and outcomes[row.tx_id] is None])
