"""Answering the broker's check-back from the status table (docs/design.md §3C).

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
from dataclasses import dataclass

from sqlalchemy import Engine, select, text

from outbox.models import transaction_table as t

__all__ = ["PG_XID_PROPERTY", "CheckAnswer", "check_state"]

log = logging.getLogger("rocketbox.checkback")

#: the half's property carrying the PostgreSQL xid of the writing transaction
PG_XID_PROPERTY = "ROCKETBOX_PG_XID"


@dataclass(frozen=True, slots=True)
class CheckAnswer:
    state: str  # COMMIT, ROLLBACK or UNKNOWN
    reason: str


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


def half_age_seconds(born_or_store_ms: int) -> float:
    return max(0.0, time.time() - born_or_store_ms / 1000)
