"""rocketbox's Celery tasks, registered on an app by :func:`register_tasks`.

``rocketbox.relay(tx_ids=None)``
    One relay pass over the given rows (the on_commit hook's ids), or over
    any due rows; after relaying given rows of message groups, one more pass
    over any due rows (the next rows of those groups, held back until now). A
    whole-pass failure (broker or database unreachable,
    :class:`~outbox.errors.RelayError`) is retried with exponential backoff;
    a row the broker refused is rescheduled on the row itself (backoff,
    parking) and left to the sweeper.
``rocketbox.sweep()``
    Relay passes until nothing is due (``RelaySettings.drain_lanes`` of them
    at once), on demand (nothing schedules it: every worker's sweeper lane,
    :mod:`outbox.celery.sweeper`, does the same on its own thread every
    ``sweep_interval``). Never retried.
``rocketbox.end_transaction(tx_id, state, half_offset, queue_offset)``
    Half-first mode: end a transaction after the local commit, retried with
    backoff while the broker is unreachable; then mark the row relayed.

All three are ``acks_late``: a worker killed mid-task leaves the task to be
delivered again, which is safe because relaying is idempotent.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from sqlalchemy.exc import OperationalError

from outbox.celery.faults import classify
from outbox.celery.state import RocketboxState, rocketbox_state
from outbox.ending import END_TRANSACTION_TASK, mark_ended
from outbox.errors import RelayError
from outbox.relay import RelayReport
from outbox.targets.base import EndOutcome, HalfStored, LeftToCheckback, TxEnd, tx_state

__all__ = ["END_TRANSACTION_TASK", "RELAY_TASK", "SWEEP_TASK", "TRANSIENT_ERRORS",
           "register_tasks"]

log = logging.getLogger("rocketbox.celery")

RELAY_TASK = "rocketbox.relay"
SWEEP_TASK = "rocketbox.sweep"

#: a pass that failed as a whole (broker or database unreachable): try again later
TRANSIENT_ERRORS = (RelayError, OperationalError)


def _summary(report: RelayReport) -> dict[str, int]:
    return {"claimed": report.claimed, "relayed": report.relayed, "failed": report.failed,
            "parked": report.parked, "held_back": report.held_back}


def relay(task: Any, tx_ids: list[str] | None = None) -> dict[str, int]:
    """``rocketbox.relay``: one pass over ``tx_ids`` (or over any due rows)."""
    state: RocketboxState = rocketbox_state(task.app)
    relay = state.relay(task.request.id)
    try:
        report = relay.run_once(only=tx_ids or None)
        if tx_ids and report.relayed_grouped:
            # Rows of the same message group committed just after these were held back
            # while these were in flight (order per group); take them now rather than
            # at the next sweep. (Ungrouped rows hold nothing back: no second claim.)
            report.add(relay.run_once())
    except TRANSIENT_ERRORS as exc:
        fault = classify(exc)
        if fault is not None and not fault.transient:
            log.error("relay pass failed: %s: %s; not retried (the sweeper stops the worker)",
                      fault.component, fault.text)
            raise
        delay = state.retry_delay(task.request.retries)
        log.warning("relay pass failed: %s: %s; retry %d in %.1fs",
                    fault.component if fault else "?", fault.text if fault else exc,
                    task.request.retries + 1, delay)
        raise task.retry(exc=exc, countdown=delay) from exc
    if report.failed:
        log.warning("relay: %d row(s) failed, %d parked; the sweeper retries them",
                    report.failed, report.parked)
    return _summary(report)


def sweep(task: Any) -> dict[str, int]:
    """``rocketbox.sweep``: relay until nothing is due; a failure is logged, not retried."""
    state: RocketboxState = rocketbox_state(task.app)
    try:
        report = state.relay(task.request.id).drain(max_passes=state.settings.sweep_passes)
    except TRANSIENT_ERRORS as exc:
        fault = classify(exc)
        log.warning("sweep failed: %s: %s; the sweeper lane tries again",
                    fault.component if fault else "?", fault.text if fault else exc)
        return {"claimed": 0, "relayed": 0, "failed": 0, "parked": 0, "held_back": 0}
    if report.relayed or report.failed:
        log.info("sweep relayed %d, failed %d, parked %d", report.relayed, report.failed,
                 report.parked)
    return _summary(report)


def end_transaction(task: Any, tx_id: str, state_name: str, half_offset: int,
                    queue_offset: int) -> dict[str, Any]:
    """``rocketbox.end_transaction``: end a half-first transaction, then mark its row."""
    state: RocketboxState = rocketbox_state(task.app)
    end = TxEnd(HalfStored(tx_id, "", half_offset, queue_offset), tx_state(state_name))
    result: EndOutcome | RelayError
    try:
        [result] = state.publisher().end_transactions([end])
    except RelayError as exc:
        result = exc
    if isinstance(result, Exception):
        if getattr(result, "retriable", False):
            delay = state.retry_delay(task.request.retries)
            log.warning("end-transaction %s failed (%s); retry in %.1fs", tx_id, result, delay)
            raise task.retry(exc=result, countdown=delay) from result
        log.error("end-transaction %s (%s) refused: %s", tx_id, state_name, result,
                  extra={"tx_id": tx_id})
        return {"tx_id": tx_id, "ended": False, "error": str(result)}
    if isinstance(result, LeftToCheckback):
        return {"tx_id": tx_id, "ended": False, "error": result.reason}
    if state_name == "COMMIT":
        mark_ended(state.outbox.engine, end, result)
    return {"tx_id": tx_id, "ended": True, "commit_offset": result.commit_offset}


def register_tasks(app: Celery) -> None:
    """Add the three tasks to ``app`` under their explicit names."""
    max_retries = rocketbox_state(app).settings.max_retries
    common: dict[str, Any] = {"bind": True, "acks_late": True, "reject_on_worker_lost": True}
    app.task(name=RELAY_TASK, max_retries=max_retries, **common)(relay)
    app.task(name=SWEEP_TASK, max_retries=0, **common)(sweep)
    app.task(name=END_TRANSACTION_TASK, max_retries=max_retries, **common)(end_transaction)
