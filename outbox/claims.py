"""Claiming due rows: the first step of a relay pass (:mod:`outbox.relay`).

:func:`claim` takes up to ``batch_size`` due rows in a short transaction
(``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has one writer), setting
``claimed_by`` and a lease ``claimed_until``. The transaction commits before
any network I/O, so no lock is held while the broker is called. Rows are
picked oldest ``next_attempt_at`` first, walking the pending index, and
returned in ``seq`` order. Per message group, a grouped row is claimed only
together with every unrelayed row of its group before it.

On PostgreSQL through psycopg 3 the claim's transaction (``BEGIN``, ``SET
LOCAL enable_sort = off``, the claiming ``UPDATE``, ``COMMIT``) goes to the
server in one pipeline: one round trip instead of four. Under a steady load a
pass claims a few rows and those round trips were most of the time from a
commit to its claim (docs/outbox.md). When the claimed rows hold a message
group, the group check (:func:`_group_runs`) follows in a second
transaction; until then the rows are this claim's, under its lease.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import msgspec
from sqlalchemy import (
    Connection,
    Dialect,
    Engine,
    Integer,
    and_,
    any_,
    bindparam,
    exists,
    false,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from outbox.config import Outbox
from outbox.models import aware
from outbox.models import transaction_table as t

if TYPE_CHECKING:
    import psycopg

__all__ = ["ROW_COLUMNS", "ClaimedRow", "claim", "pipeline_sql", "run_pipelined"]


class ClaimedRow(msgspec.Struct, frozen=True):
    """A claimed status row: what the relay sends, ends and records."""

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
    #: RocketMQ: the recorded half's ids (None: no half recorded)
    half_message_id: str | None = None
    half_transaction_id: str | None = None


ROW_COLUMNS = (t.c.tx_id, t.c.seq, t.c.topic, t.c.tag, t.c["keys"], t.c.message_group, t.c.body,
                t.c.headers, t.c.state, t.c.attempts, t.c.half_offset, t.c.created_at,
                t.c.half_message_id, t.c.half_transaction_id)



def _row(columns: Any) -> ClaimedRow:
    """A claimed row from a result row of ``ROW_COLUMNS``."""
    return ClaimedRow(*columns)


def _seq(row: Any) -> int:
    seq: int = row.seq
    return seq


def _free(row: Any, now: datetime) -> bool:
    """Due, not parked, and not claimed by anyone (or the claim's lease ran out)."""
    return (not row.parked and aware(row.next_attempt_at) <= now
            and (row.claimed_until is None or aware(row.claimed_until) < now))


def _blocked() -> ColumnElement[bool]:
    """A grouped row waits behind an earlier row of its group that cannot go now.

    That row is parked, backing off, or in flight under another claim's lease.
    Such rows are left out of the claim's window: otherwise a group whose head
    is stuck fills every window with rows that cannot go, and the rows behind
    them (other groups, ungrouped rows) are never reached. The probe follows
    the ``(message_group, seq)`` index of unrelayed rows. ``now`` is the
    ``c_now`` parameter.
    """
    earlier = t.alias("earlier")
    return exists().where(
        earlier.c.message_group == t.c.message_group, earlier.c.seq < t.c.seq,
        earlier.c.relayed_at.is_(None),
        or_(earlier.c.parked, earlier.c.next_attempt_at > _NOW,
            earlier.c.claimed_until >= _NOW))


#: the parameters of the claim's statements (built once, :func:`_due` and :func:`_pg_claim`)
_NOW: BindParameter[datetime] = bindparam("c_now", type_=t.c.next_attempt_at.type)
_ONLY: BindParameter[str] = bindparam("c_only", expanding=True, type_=t.c.tx_id.type)
_CREATED_BEFORE: BindParameter[datetime] = bindparam("c_created_before",
                                                     type_=t.c.created_at.type)
_LIMIT: BindParameter[int] = bindparam("c_limit", type_=Integer())


@functools.cache
def _due(only: bool, older: bool) -> ColumnElement[bool]:
    """Due, free and not blocked (parameter ``c_now``), and with ``older`` committed before
    ``c_created_before``, with ``only`` among ``c_only``.

    Built once per shape: constructing this expression on every pass cost more
    Python time than PostgreSQL spent running it (the relay's passes are small
    under a steady load), and a statement built once is also compiled once.
    """
    # ``NOT parked`` (not ``parked IS false``) matches the partial index's WHERE
    due = and_(t.c.relayed_at.is_(None), ~t.c.parked, t.c.next_attempt_at <= _NOW,
               or_(t.c.claimed_until.is_(None), t.c.claimed_until < _NOW),
               or_(t.c.message_group.is_(None), ~_blocked()))
    if older:
        due = and_(due, t.c.created_at <= _CREATED_BEFORE)
    if only:
        due = and_(due, t.c.tx_id.in_(_ONLY))
    return due


@functools.cache
def _pg_claim(only: bool, older: bool) -> Any:
    """PostgreSQL's claim in one statement: pick and lock (``SKIP LOCKED``) the ``c_limit``
    due rows with the oldest ``next_attempt_at``, mark them claimed, return them whole."""
    picked = (select(t.c.tx_id).where(_due(only, older)).order_by(t.c.next_attempt_at)
              .limit(_LIMIT).with_for_update(skip_locked=True))
    return (update(t).where(t.c.tx_id == any_(func.array(picked.scalar_subquery())))
            .values(claimed_by=bindparam("c_name"), claimed_until=bindparam("c_until"))
            .returning(*ROW_COLUMNS))


def claim(outbox: Outbox, name: str, limit: int | None = None, *, only: Sequence[str] | None = None,
          older_than: float | None = None) -> list[ClaimedRow]:
    """Claim due rows; ``older_than`` (seconds) keeps only rows committed that long ago.

    The window is the ``limit`` due rows with the oldest ``next_attempt_at``,
    read in the pending index's order, so the scan stops after ``limit`` rows
    however long the backlog is (ordering by ``seq`` made PostgreSQL read and
    sort every due row on every pass). Grouped rows are then kept only as
    runs from their group's head (:meth:`_group_runs`). The claimed rows are
    returned in ``seq`` order.
    """
    limit = limit or outbox.relay.batch_size
    now = datetime.now(UTC)
    until = now + timedelta(seconds=outbox.relay.lease_seconds)
    params: dict[str, Any] = {"c_now": now, "c_until": until, "c_name": name,
                              "c_limit": limit}
    if older_than is not None:
        params["c_created_before"] = now - timedelta(seconds=older_than)
    if only:
        params["c_only"] = list(only)
    shape = (bool(only), older_than is not None)
    sql = None if only else _pipelined_sql(outbox.engine.dialect, older_than is not None)
    if sql is not None:
        rows = _claim_pipelined(outbox.engine, sql, params)
        if any(row.message_group is not None for row in rows):
            rows = _group_runs_after(outbox.engine, name, rows, limit, now, params,
                                     heads=_due(*shape))
        return sorted(rows, key=_seq)
    with outbox.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            # Take SQLite's write lock before reading: two claims that both read
            # first would pick the same rows, or deadlock upgrading their locks.
            conn.execute(update(t).where(false()).values(claimed_by=t.c.claimed_by))
            rows = _take(conn, _due(*shape), params, limit=limit)
        else:
            if not only:
                # Walk the pending index: the planner's row estimate is often stale
                # for a backlog written since the last ANALYZE, and then it reads
                # and sorts every due row to return the first ``limit``.
                conn.exec_driver_sql(_SORT_OFF)
                conn.exec_driver_sql(_CUSTOM_PLAN)
            rows = [_row(row) for row in conn.execute(_pg_claim(*shape), params)]
        if any(row.message_group is not None for row in rows):
            rows = _group_runs(conn, name, rows, limit, now, params,
                               heads=None if only else _due(*shape))
    return sorted(rows, key=_seq)


@functools.cache
def _pipelined_sql(dialect: Dialect, older: bool) -> str | None:
    """The claim's SQL for :func:`_claim_pipelined`, or None where it cannot run (not
    PostgreSQL through psycopg 3, or a libpq without pipeline mode)."""
    compiled = pipeline_sql(dialect, _pg_claim(False, older))
    return None if compiled is None else compiled[0]


@functools.cache
def pipeline_sql(dialect: Dialect, statement: Any) -> tuple[str, dict[str, Any]] | None:
    """``statement`` as :func:`run_pipelined` sends it: its SQL and the values compiled
    into it (``claimed_by=None`` is a parameter too; give the rest); None where a
    pipeline cannot run (not PostgreSQL through psycopg 3, or a libpq without pipeline
    mode)."""
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        return None
    import psycopg

    if not psycopg.Pipeline.is_supported():
        return None
    compiled = statement.compile(dialect=dialect)
    return str(compiled), dict(compiled.params)


#: the pipeline's statements around the claim (the claim's own transaction, sorts off)
_PIPELINE_BEGIN = "BEGIN"
_PIPELINE_SORT_OFF = _SORT_OFF = "SET LOCAL enable_sort = off"
#: psycopg prepares a statement run five times on a connection, and PostgreSQL may then
#: keep one generic plan for it. The claim's generic plan got slower with every row
#: relayed (a fresh table, one row claimed and marked at a time: 0.61 ms a claim after
#: 2,000 rows, 1.44 ms after 12,000; flat at 0.66-0.69 ms when planned for its values each
#: time, as this asks), so the claim is planned for its own timestamps every time
#: (PostgreSQL planned it in 0.14 ms, docs/outbox.md "How a pass claims"); the relay's
#: record too (0.44 ms after 2,000 rows, 0.97 after 8,000, in autocommit)
_CUSTOM_PLAN = "SET LOCAL plan_cache_mode = force_custom_plan"
_PIPELINE_COMMIT = "COMMIT"


def _claim_pipelined(engine: Engine, sql: str, params: dict[str, Any]) -> list[ClaimedRow]:
    """The claim's transaction in one psycopg pipeline (:func:`run_pipelined`), sorts off."""
    return [ClaimedRow(*row) for row in run_pipelined(engine, sql, params, sort_off=True)]


def run_pipelined(engine: Engine, sql: str, params: dict[str, Any], *,
                  sort_off: bool = False) -> list[Any]:
    """Run ``sql`` in a transaction of its own, planned for its values
    (:data:`_CUSTOM_PLAN`; ``sort_off``: and sorts off), in one psycopg pipeline on a
    pooled connection: one round trip. Returns its rows (none without ``RETURNING``).

    psycopg would sync after a ``BEGIN`` of its own, so the connection is put
    in autocommit for the pipeline and the pipeline sends ``BEGIN`` and
    ``COMMIT`` itself; it is back out of autocommit before it returns to the
    pool. A driver error comes out as SQLAlchemy's (``OperationalError`` for
    a lost connection, which is invalidated), as from any other statement.
    """
    import psycopg

    with engine.connect() as conn:  # a failed connect is SQLAlchemy's error, as elsewhere
        pg = cast("psycopg.Connection[Any]", conn.connection.driver_connection)  # psycopg
        try:
            pg.autocommit = True
            cursor = pg.cursor()
            try:
                with pg.pipeline():
                    pg.execute(_PIPELINE_BEGIN)
                    if sort_off:
                        pg.execute(_PIPELINE_SORT_OFF)
                    pg.execute(_CUSTOM_PLAN)
                    cursor.execute(sql, params)
                    pg.execute(_PIPELINE_COMMIT)
                rows = cursor.fetchall() if cursor.description is not None else []
            finally:
                cursor.close()
            pg.autocommit = False
            return rows
        except psycopg.Error as exc:
            invalidated = _give_back(conn, pg, exc)
            raise DBAPIError.instance(sql, params, exc, psycopg.Error,
                                      connection_invalidated=invalidated,
                                      dialect=engine.dialect) from exc


def _give_back(conn: Connection, pg: psycopg.Connection[Any], error: psycopg.Error) -> bool:
    """After a failed pipeline: roll back and leave autocommit, or, for a lost (or
    unusable) connection, invalidate it; True when it was invalidated."""
    import psycopg
    from psycopg.pq import TransactionStatus

    if not (pg.closed or pg.broken):  # what SQLAlchemy's psycopg dialect calls a disconnect
        try:
            if pg.info.transaction_status != TransactionStatus.IDLE:
                pg.rollback()
            pg.autocommit = False
            return False
        except psycopg.Error:
            pass
    conn.invalidate(error)
    return True


def _group_runs_after(engine: Engine, name: str, rows: list[ClaimedRow], limit: int,
                      now: datetime, params: dict[str, Any], *, heads: ColumnElement[bool]
                      ) -> list[ClaimedRow]:
    """:func:`_group_runs` in a transaction of its own, after a pipelined claim. If it
    fails, the claimed rows are given back (best effort: else their lease runs out)."""
    try:
        with engine.begin() as conn:
            return _group_runs(conn, name, rows, limit, now, params, heads=heads)
    except BaseException:
        with contextlib.suppress(Exception), engine.begin() as conn:
            conn.execute(update(t).where(t.c.tx_id.in_([r.tx_id for r in rows]),
                                         t.c.claimed_by == name)
                         .values(claimed_by=None, claimed_until=None))
        raise


def _take(conn: Connection, where: ColumnElement[bool], params: dict[str, Any], *,
          limit: int | None = None) -> list[ClaimedRow]:
    """Lock (skipping rows another claim holds), mark claimed and return the rows."""
    if conn.dialect.name == "postgresql":
        picked = select(t.c.tx_id).where(where)
        if limit is not None:
            picked = picked.order_by(t.c.next_attempt_at).limit(limit)
        # one statement: pick and lock, mark claimed, return the rows whole
        return [_row(row) for row in conn.execute(
            update(t).where(t.c.tx_id == any_(func.array(
                picked.with_for_update(skip_locked=True).scalar_subquery())))
            .values(claimed_by=bindparam("c_name"), claimed_until=bindparam("c_until"))
            .returning(*ROW_COLUMNS), params)]
    query = select(*ROW_COLUMNS).where(where)
    if limit is not None:
        query = query.order_by(t.c.next_attempt_at).limit(limit)
    rows = [_row(row) for row in conn.execute(query, params)]
    if rows:
        conn.execute(update(t).where(t.c.tx_id.in_([r.tx_id for r in rows]))
                     .values(claimed_by=params["c_name"], claimed_until=params["c_until"]))
    return rows


def _group_runs(conn: Connection, name: str, rows: list[ClaimedRow], limit: int, now: datetime,
                params: dict[str, Any], *, heads: ColumnElement[bool] | None
                ) -> list[ClaimedRow]:
    """Keep ungrouped rows, and grouped ones only as a run from their group's head.

    Each group's unrelayed rows up to the last one claimed are read without
    locks (a row that another claim is taking still shows, and ends the run
    there). The window may lack a group's head: a retried head's
    ``next_attempt_at`` is later than that of the rows it held back. So,
    given ``heads`` (the claim's due condition; None for an ``only``
    claim, which takes nothing beyond its rows), a run also takes the
    group's earlier rows that are due and free, and a group whose head was
    retried is not stuck behind its own rows. At most ``limit`` rows stay
    claimed (the highest ``seq`` go); the others are released in this
    transaction.
    """
    mine = {row.tx_id: row for row in rows}
    tops: dict[str, int] = {}
    for row in rows:
        if row.message_group is not None:
            tops[row.message_group] = max(tops.get(row.message_group, row.seq), row.seq)
    pending: dict[str, list[Any]] = {}
    for p in conn.execute(
            select(t.c.tx_id, t.c.message_group, t.c.seq, t.c.parked, t.c.next_attempt_at,
                   t.c.claimed_until)
            .where(t.c.relayed_at.is_(None), t.c.message_group.in_(list(tops)),
                   t.c.seq <= max(tops.values()))):
        if p.seq <= tops[p.message_group]:
            pending.setdefault(p.message_group, []).append(p)
    for members in pending.values():
        members.sort(key=_seq)  # here, not in SQL: the claim may have sorts off

    def runs(take_free: bool) -> list[tuple[int, str]]:
        """(seq, tx_id) of every group's run from its head."""
        out = []
        for members in pending.values():
            for p in members:
                if p.tx_id not in mine and not (take_free and _free(p, now)):
                    break
                out.append((p.seq, p.tx_id))
        return out

    ungrouped = [(row.seq, row.tx_id) for row in rows if row.message_group is None]
    # the lowest seqs of each run are a prefix of it: trimming keeps runs whole
    keep = {tx for _seq, tx in sorted(ungrouped + runs(heads is not None))[:limit]}
    wanted = [tx for tx in keep if tx not in mine]
    if wanted and heads is not None:
        for row in _take(conn, and_(heads, t.c.tx_id.in_(wanted)), params):
            mine[row.tx_id] = row
        keep &= {tx for _seq, tx in ungrouped + runs(False)}  # a run ends at a row not taken
    release = [tx for tx in mine if tx not in keep]
    if release:
        conn.execute(update(t).where(t.c.tx_id.in_(release), t.c.claimed_by == name)
                     .values(claimed_by=None, claimed_until=None))
    return [mine[tx] for tx in keep]
