"""Answering the broker's check-back from the status table (docs/design.md §3C).

One rule set for every target. A target turns the broker's question into a
:class:`CheckQuestion` (the row's ``tx_id``, the half's id, the xid it
carries, the broker's store time) and calls :func:`answer_checkback`, which

1. ages the half by the broker's **store time** (its born time only when the
   broker gives none), so clock skew between producers does not matter;
2. reads the xid from :data:`PG_XID_PROPERTY`, logging a malformed one;
3. runs the target's own rules first (:data:`HalfRule`: RocketMQ's per-half
   rules and hand-off window, :mod:`outbox.targets.rocketmq_checkback`), then
   :func:`check_state`;
4. answers ``UNKNOWN`` when the status table cannot be read (the broker asks
   again), counts the answer (``observe_checkback``) and logs it.

:func:`check_state`, the rules every target shares:

* A row in ``COMMIT`` or ``ROLLBACK`` gives that state.
* No row gives ``ROLLBACK`` once the database proves the writing transaction
  is gone: on PostgreSQL, ``pg_xact_status`` of the xid the half carries
  (``aborted``, or ``committed`` without having written the row); elsewhere,
  the half being older than ``local_tx_timeout``.
* Anything else gives ``UNKNOWN``, and the broker asks again later.

It never consults anything in memory: the table is the only truth.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import Engine, select, text

from outbox.metrics import observe_checkback
from outbox.models import transaction_table as t

if TYPE_CHECKING:
    from outbox.config import Outbox

__all__ = ["PG_XID_PROPERTY", "CheckAnswer", "CheckQuestion", "HalfRule", "answer_checkback",
           "check_state", "half_age", "parse_pg_xid"]

log = logging.getLogger("rocketbox.checkback")
#: the answers (and a malformed xid) are logged where the responders log
answers_log = logging.getLogger("rocketbox.checker")

#: the half's property carrying the PostgreSQL xid of the writing transaction
PG_XID_PROPERTY = "ROCKETBOX_PG_XID"


@dataclass(frozen=True, slots=True)
class CheckAnswer:
    state: str  # COMMIT, ROLLBACK or UNKNOWN
    reason: str


@dataclass(frozen=True, slots=True)
class CheckQuestion:
    """A broker's check-back of one half, in the seam's terms (the target fills it in)."""

    #: the row's ``tx_id`` the half carries; None: the half is not rocketbox's
    tx_id: str | None
    #: the half's own id (broker_lite: its message id; RocketMQ: its UNIQ_KEY)
    half_id: str
    #: :data:`PG_XID_PROPERTY` as the half carries it (None: absent)
    raw_pg_xid: str | None
    #: the broker's store time of the half (ms), else its born time; 0: unknown
    stored_at_ms: int
    #: how many times the broker has checked it, when the broker says
    check_times: int | None = None


#: a target's own rule: an answer, or None to go on to the next rule and then
#: :func:`check_state`; called with the outbox, the question and the time now
HalfRule = Callable[["Outbox", CheckQuestion, datetime], "CheckAnswer | None"]


def half_age(stored_at_ms: int, now: float) -> float:
    """Seconds since ``stored_at_ms`` (0 when unknown; never negative)."""
    return max(0.0, now - stored_at_ms / 1000) if stored_at_ms else 0.0


def parse_pg_xid(raw: str | None, half_id: str) -> int | None:
    """The xid in :data:`PG_XID_PROPERTY` (None when absent; a malformed one is logged)."""
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        answers_log.warning("half %s carries a malformed %s: %r", half_id, PG_XID_PROPERTY, raw)
        return None


def answer_checkback(outbox: Outbox, question: CheckQuestion, *,
                     rules: Sequence[HalfRule] = (), now: float | None = None) -> CheckAnswer:
    """The answer to ``question`` from the status table (module doc); never raises."""
    wall = time.time() if now is None else now
    age = half_age(question.stored_at_ms, wall)
    tx_id = question.tx_id
    if not tx_id:
        answer = CheckAnswer("UNKNOWN", "no tx_id on the half: not rocketbox's")
    else:
        try:
            answer = _answer(outbox, tx_id, question, rules, age,
                             datetime.fromtimestamp(wall, UTC))
        except Exception as exc:  # the database is down: not this half's fault
            answers_log.warning("check-back %s: the status table is unreadable (%s): UNKNOWN",
                                tx_id, exc)
            answer = CheckAnswer("UNKNOWN", f"status table unreadable: {exc}")
    observe_checkback(answer.state)  # it never raises
    checks = "" if question.check_times is None else f"check {question.check_times}, "
    answers_log.info("check-back %s half %s (%s%.1fs old): %s (%s)", tx_id, question.half_id,
                     checks, age, answer.state, answer.reason,
                     extra={"tx_id": tx_id, "state": answer.state,
                            "check_times": question.check_times})
    return answer


def _answer(outbox: Outbox, tx_id: str, question: CheckQuestion, rules: Sequence[HalfRule],
            age: float, now: datetime) -> CheckAnswer:
    for rule in rules:
        answer = rule(outbox, question, now)
        if answer is not None:
            return answer
    return check_state(outbox.engine, tx_id,
                       pg_xid=parse_pg_xid(question.raw_pg_xid, question.half_id),
                       half_age_seconds=age, local_tx_timeout=outbox.local_tx_timeout)


def check_state(engine: Engine, tx_id: str, *, pg_xid: int | None, half_age_seconds: float,
                local_tx_timeout: float) -> CheckAnswer:
    """What the status table says about ``tx_id``."""
    with engine.connect() as conn:
        state = conn.execute(select(t.c.state).where(t.c.tx_id == tx_id)).scalar()
        if state in ("COMMIT", "ROLLBACK"):
            return CheckAnswer(state, "status row")
        if state is not None:
            return CheckAnswer("UNKNOWN", f"status row says {state}")
        if conn.dialect.name == "postgresql" and pg_xid is not None:
            status = conn.execute(text("SELECT pg_xact_status(CAST(:x AS xid8))"),
                                  {"x": str(pg_xid)}).scalar()
            if status == "aborted":
                return CheckAnswer("ROLLBACK", f"no row; transaction {pg_xid} aborted")
            if status == "committed":
                # It may have committed after the row was read above: read again (a new
                # statement, a new snapshot). Still no row: the insert was not part of it
                # (a rolled-back savepoint), so there is nothing to deliver.
                state = conn.execute(select(t.c.state).where(t.c.tx_id == tx_id)).scalar()
                if state in ("COMMIT", "ROLLBACK"):
                    return CheckAnswer(state, f"status row (transaction {pg_xid} committed)")
                if state is not None:
                    return CheckAnswer("UNKNOWN", f"status row says {state}")
                return CheckAnswer("ROLLBACK", f"no row; transaction {pg_xid} committed "
                                               "without it")
            if status == "in progress":
                return CheckAnswer("UNKNOWN", f"transaction {pg_xid} still running")
            # NULL: too old for the commit log; fall back to age
    if half_age_seconds > local_tx_timeout:
        return CheckAnswer("ROLLBACK", f"no row after {half_age_seconds:.0f}s "
                                       f"(> local_tx_timeout {local_tx_timeout:g}s)")
    return CheckAnswer("UNKNOWN", "no row yet")

