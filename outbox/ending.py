"""After a ``half_first`` commit: end the halves, then mark the committed rows relayed.

Both ``half_first`` flows end their halves here: :func:`outbox.half_first.send_in_transaction`
(the seed API's producer) and the decorators' unit of work
(:mod:`integrations._unit`), and so does the Celery task
:data:`END_TRANSACTION_TASK`. :func:`end_then_mark` hands the ends to that task
when a Celery app is given (the worker retries a failed end), else ends them
at once through an :data:`Ender`; each row whose ``COMMIT`` the broker took
is marked relayed. Nothing here raises: an end that fails is left to the
relay (which re-ends a committed row after ``sweep_after``) and to the
broker's check-back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import Engine, update

from outbox.config import Outbox
from outbox.errors import OutboxError
from outbox.models import transaction_table as t
from outbox.targets.base import EndOutcome, TxEnd, TxEnded

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["END_TRANSACTION_TASK", "Ender", "end_then_mark", "mark_relayed"]

log = logging.getLogger("rocketbox.half_first")

#: the Celery task that ends one half-first transaction, then marks its row
END_TRANSACTION_TASK = "rocketbox.end_transaction"

#: ends transactions now, one outcome per end (a publisher's ``end_transactions``)
Ender = Callable[[Sequence[TxEnd]], list[EndOutcome]]


def mark_relayed(engine: Engine, tx_id: str, *, half_offset: int | None,
                 commit_offset: int | None, broker_position: str | None = None) -> bool:
    """Record that ``tx_id`` was committed in the broker; False if there is no such row.

    ``broker_position`` (a target's :attr:`~outbox.targets.base.TxEnded.position`)
    is written only when given: a broker_lite or RocketMQ row leaves the column alone.
    """
    values: dict[str, object] = {
        "relayed_at": datetime.now(UTC), "half_offset": half_offset,
        "commit_offset": commit_offset, "claimed_by": None, "claimed_until": None,
        "last_error": None}
    if broker_position is not None:
        values["broker_position"] = broker_position
    with engine.begin() as conn:
        result = conn.execute(update(t).where(t.c.tx_id == tx_id, t.c.relayed_at.is_(None))
                              .values(values))
    return bool(result.rowcount)


def end_then_mark(outbox: Outbox, ends: Sequence[TxEnd], ender: Ender | None, *,
                  celery_app: Celery | None = None) -> list[EndOutcome] | str | None:
    """End ``ends`` (through the Celery task, or ``ender``), marking ended ``COMMIT`` rows.

    Returns the outcomes, ``"enqueued"`` when the task will end them, or None
    when nothing was sent (no ``ender``, or the request did not get through).
    A failure is logged.
    """
    if not ends:
        return []
    if celery_app is not None:
        try:
            task = celery_app.tasks[END_TRANSACTION_TASK]
            for end in ends:
                task.apply_async(args=[end.tx_id, end.state, end.half.half_offset,
                                       end.half.queue_offset], retry=False)
            return "enqueued"
        except Exception:
            log.warning("could not enqueue end-transaction; ending it here", exc_info=True)
    if ender is None:
        return None
    try:
        outcomes = ender(ends)
    except OutboxError as exc:
        log.warning("end-transaction of %d half(s) failed; check-back resolves them: %s",
                    len(ends), exc)
        return None
    for end, outcome in zip(ends, outcomes, strict=True):
        if not isinstance(outcome, TxEnded):
            log.warning("end-transaction %s (%s) did not go through; the relay or check-back "
                        "resolves it: %s", end.tx_id, end.state, outcome,
                        extra={"tx_id": end.tx_id})
        elif end.state == "COMMIT":
            mark_ended(outbox.engine, end, outcome)
    return outcomes


def mark_ended(engine: Engine, end: TxEnd, ended: TxEnded) -> None:
    """:func:`mark_relayed` for an end the broker took; a database failure is logged."""
    try:
        mark_relayed(engine, end.tx_id, half_offset=end.half.half_offset,
                     commit_offset=ended.commit_offset,
                     broker_position=ended.position or end.half.position)
    except Exception:
        log.warning("could not mark %s relayed", end.tx_id, exc_info=True)
