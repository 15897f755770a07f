"""Retention: delete relayed status rows and old inbox rows, a small batch at a time.

What goes:

* ``rocketbox_transaction`` rows with ``relayed_at`` before the cut-off
  (relayed, so the broker holds their outcome). Unrelayed rows and parked
  rows are **never** deleted, whatever their age.
* ``rocketbox_inbox`` rows with ``processed_at`` before the inbox cut-off,
  only when one is given. Keep inbox rows longer than the broker can
  redeliver a message, or a late redelivery is processed twice.

How: each batch is one short transaction deleting at most ``batch`` rows, so
no lock is held for long and the relay keeps working meanwhile.

* PostgreSQL: ``DELETE ... WHERE ctid = ANY(ARRAY(SELECT ctid ... LIMIT n
  FOR UPDATE SKIP LOCKED))``: a TID scan, and rows some other transaction
  holds are skipped rather than waited for.
* SQLite: the same with ``rowid IN (SELECT rowid ... LIMIT n)``.
* Anything else: select a batch of keys, then delete them by key.

A status row's ``relayed_at`` is never before its ``created_at``, so the
query also says ``created_at < cut-off``, which lets the ``created_at``
index narrow the search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Table,
    and_,
    delete,
    func,
    literal_column,
    select,
    tuple_,
)

from outbox.models import inbox_table, transaction_table

__all__ = ["RetentionReport", "count_expired", "purge"]

#: ``progress(table_name, rows_deleted_by_this_batch)`` after every batch
Progress = Callable[[str, int], None]


@dataclass
class RetentionReport:
    """How many rows :func:`purge` deleted, and in how many batches."""

    transactions: int = 0
    inbox: int = 0
    batches: int = 0


def _expired_transactions(cutoff: datetime) -> ColumnElement[bool]:
    t = transaction_table
    return and_(t.c.relayed_at.is_not(None), t.c.relayed_at < cutoff,
                t.c.created_at < cutoff, ~t.c.parked)


def _expired_inbox(cutoff: datetime) -> ColumnElement[bool]:
    return inbox_table.c.processed_at < cutoff


def count_expired(engine: Engine, *, relayed_before: datetime,
                  inbox_before: datetime | None = None) -> tuple[int, int]:
    """How many rows :func:`purge` would delete now: ``(transactions, inbox)``."""
    with engine.connect() as conn:
        transactions = conn.execute(select(func.count()).select_from(transaction_table)
                                    .where(_expired_transactions(relayed_before))).scalar_one()
        inbox = 0
        if inbox_before is not None:
            inbox = conn.execute(select(func.count()).select_from(inbox_table)
                                 .where(_expired_inbox(inbox_before))).scalar_one()
    return int(transactions), int(inbox)


def _postgresql_batch(conn: Connection, table: Table, where: ColumnElement[bool],
                      limit: int) -> int:
    ctid: ColumnElement[Any] = literal_column("ctid")
    inner = (select(ctid).select_from(table).where(where).limit(limit)
             .with_for_update(skip_locked=True))
    # ctid = any(array((SELECT ...))): an InitPlan, then a TID scan
    chosen = func.any(func.array(inner.scalar_subquery()))
    return conn.execute(delete(table).where(ctid == chosen)).rowcount


def _sqlite_batch(conn: Connection, table: Table, where: ColumnElement[bool],
                  limit: int) -> int:
    rowid: ColumnElement[Any] = literal_column("rowid")
    chosen = select(rowid).select_from(table).where(where).limit(limit).scalar_subquery()
    return conn.execute(delete(table).where(rowid.in_(chosen))).rowcount


def _generic_batch(conn: Connection, table: Table, where: ColumnElement[bool],
                   limit: int) -> int:
    key = list(table.primary_key.columns)
    rows = conn.execute(select(*key).where(where).limit(limit)).all()
    if not rows:
        return 0
    if len(key) == 1:
        return conn.execute(delete(table).where(key[0].in_([r[0] for r in rows]))).rowcount
    return conn.execute(delete(table).where(tuple_(*key).in_([tuple(r) for r in rows]))
                        ).rowcount


def _delete_in_batches(engine: Engine, table: Table, where: ColumnElement[bool],
                       batch: int, progress: Progress | None, report: RetentionReport) -> int:
    deleted = 0
    dialect = engine.dialect.name
    step = {"postgresql": _postgresql_batch, "sqlite": _sqlite_batch}.get(dialect,
                                                                         _generic_batch)
    while True:
        with engine.begin() as conn:  # one short transaction per batch
            count = step(conn, table, where, batch)
        report.batches += 1
        deleted += count
        if progress is not None:
            progress(table.name, count)
        if count == 0:
            return deleted


def purge(engine: Engine, *, relayed_before: datetime, inbox_before: datetime | None = None,
          batch: int = 1000, progress: Progress | None = None) -> RetentionReport:
    """Delete relayed rows older than ``relayed_before`` (and inbox rows older than
    ``inbox_before``, when given), ``batch`` rows per transaction.

    ``progress`` is called after each batch with the table name and the rows
    that batch deleted. The final batch of each table deletes nothing: that is
    how the loop knows it is done.
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    report = RetentionReport()
    report.transactions = _delete_in_batches(
        engine, transaction_table, _expired_transactions(relayed_before), batch, progress,
        report)
    if inbox_before is not None:
        report.inbox = _delete_in_batches(engine, inbox_table, _expired_inbox(inbox_before),
                                          batch, progress, report)
    return report
