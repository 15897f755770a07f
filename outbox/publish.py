"""``publish()``: add a message inside the caller's open database transaction.

The row is the message: it commits or rolls back with the caller's business
rows, and nothing is sent until it has committed. ``publish`` never commits
by itself.

Order per message group: on PostgreSQL, ``publish`` takes a transaction-scoped
advisory lock on the group first, so two transactions of one group commit one
after the other and ``seq`` (from a sequence, taken after the lock) follows
their commit order. SQLite has a single writer, so there ``seq`` is
``max(seq) + 1`` computed inside the insert, which is commit order too.

Given an :class:`~sqlalchemy.ext.asyncio.AsyncSession` or
:class:`~sqlalchemy.ext.asyncio.AsyncConnection` (asyncpg, psycopg's async
driver, aiosqlite), ``publish`` returns an awaitable that runs this same
function on the sync session or connection underneath
(``run_sync``, SQLAlchemy's greenlet bridge), so the row, the lock and the
``at_commit`` ride are the sync path's, and every driver call is awaited on
the event loop. After such a session commits, ``outbox.on_commit`` runs in
the loop's default executor, never on the loop. docs/async.md has the rest.

Wake-up: when ``outbox.on_commit`` wakes the relays through PostgreSQL
(``CelerySettings.listen``, the default there: its hook has a
``wake_channel``), the row's ``INSERT`` also calls ``pg_notify`` on that
channel, its payload naming the row (:mod:`outbox.notified`), which
PostgreSQL delivers with the commit, and the hook is not called for the row
(:func:`_wake_channel`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, overload

from sqlalchemy import Connection, event, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session, SessionTransaction

from outbox.at_commit import hold
from outbox.config import Outbox
from outbox.errors import NoTransactionError
from outbox.models import transaction_table
from outbox.notified import wake_payload
from outbox.serializers import to_body
from outbox.sqla_core_commit import call_hooks
from outbox.sqla_core_commit import remember as remember_on_connection
from outbox.tracing import with_trace_context
from outbox.validation import check_message

__all__ = ["CURRENT_XID_SQL", "new_tx_id", "publish"]

log = logging.getLogger("rocketbox.outbox")
_PENDING_KEY = "rocketbox.pending"
_HOOKED_KEY = "rocketbox.hooked"
_SEQ = text("nextval('rocketbox_transaction_seq')")
#: the SQL of the current PostgreSQL transaction's id (64-bit, epoch included); one
#: definition for everything that stamps or compares a row's writing transaction
CURRENT_XID_SQL = "pg_current_xact_id()::text::bigint"
_XID = text(CURRENT_XID_SQL)
#: PostgreSQL drivers whose paramstyle is ``%(name)s`` and that take bytes,
#: datetimes and JSON text as they are
_PYFORMAT_DRIVERS = frozenset({"psycopg", "psycopg2"})


def _pg_insert_sql() -> str:
    """The outbox ``INSERT`` as plain SQL, made once from the table's own columns.

    ``publish()`` is on every decorated request's path. A Core ``insert()``
    built per call spends more time in SQLAlchemy (statement construction,
    cache key, bind processing) than PostgreSQL spends on the row, so on the
    pyformat drivers the row goes in through ``exec_driver_sql`` with this
    text: ``seq`` and ``pg_xid`` are computed by the server in the same
    statement, every other column the call sets is a parameter.
    """
    computed = {"seq": _SEQ.text, "pg_xid": _XID.text}
    names = [c.name for c in transaction_table.columns if c.name in PARAMETERS or
             c.name in computed]
    values = [computed.get(n, f"%({n})s") for n in names]
    return (f"INSERT INTO {transaction_table.name} ({', '.join(names)}) "
            f"VALUES ({', '.join(values)})")


#: the columns publish() sets from its arguments (seq and pg_xid are computed by the server)
PARAMETERS = ("tx_id", "producer_group", "topic", "tag", "keys", "message_group", "body",
              "headers", "state", "created_at", "next_attempt_at")
_PG_INSERT = _pg_insert_sql()
#: the same, waking the listening relays when the transaction commits (:func:`_wake_channel`)
_PG_INSERT_WAKE = _PG_INSERT + " RETURNING pg_notify(%(wake_channel)s, %(wake_payload)s)"


def new_tx_id() -> str:
    """A transaction id: 32 hex digits (the shape of a RocketMQ message id), 128 random bits."""
    return os.urandom(16).hex().upper()


def _require_transaction(session: Session | Connection | AsyncSession | AsyncConnection
                         ) -> None:
    if not session.in_transaction():
        what = "session" if isinstance(session, Session | AsyncSession) else "connection"
        raise NoTransactionError(f"the {what} has no transaction; use {what}.begin()")


def _connection(session: Session | Connection) -> Connection:
    _require_transaction(session)
    return session.connection() if isinstance(session, Session) else session


@overload
def publish(session: Session | Connection, topic: str, body: Any, *, outbox: Outbox,
            tag: str | None = ..., keys: str | Sequence[str] | None = ...,
            message_group: str | None = ..., headers: Mapping[str, Any] | None = ...,
            tx_id: str | None = ..., state: str = ..., at_commit: bool = ...) -> str: ...


@overload
def publish(session: AsyncSession | AsyncConnection, topic: str, body: Any, *,
            outbox: Outbox, tag: str | None = ..., keys: str | Sequence[str] | None = ...,
            message_group: str | None = ..., headers: Mapping[str, Any] | None = ...,
            tx_id: str | None = ..., state: str = ...,
            at_commit: bool = ...) -> Coroutine[Any, Any, str]: ...


def publish(
    session: Session | Connection | AsyncSession | AsyncConnection,
    topic: str,
    body: Any,
    *,
    outbox: Outbox,
    tag: str | None = None,
    keys: str | Sequence[str] | None = None,
    message_group: str | None = None,
    headers: Mapping[str, Any] | None = None,
    tx_id: str | None = None,
    state: str = "COMMIT",
    at_commit: bool = False,
) -> str | Coroutine[Any, Any, str]:
    """Add a message to the caller's transaction and return its ``tx_id``.

    With an ``AsyncSession`` or ``AsyncConnection`` it returns a coroutine:
    ``tx_id = await publish(session, ...)`` (see the module doc).

    Raises :class:`NoTransactionError` when no transaction is open, and
    :class:`InvalidMessageError` (naming the field and the limit) for a message
    the broker would refuse (:mod:`outbox.validation`). After the
    transaction commits, ``outbox.on_commit`` is told the new ids (on a Core
    connection, once the connection goes back to the pool or begins its next
    transaction: :mod:`outbox.sqla_core_commit`).

    ``at_commit=True`` is for the last message before ``commit()``: where
    :mod:`outbox.at_commit` allows (PostgreSQL, psycopg 3, migrated to 0002,
    no savepoint), the row is sent in the same query as the ``COMMIT``, which
    saves a round trip; the row is then not visible to queries inside the
    transaction, and the commit must go through SQLAlchemy. Elsewhere the row
    is written at once, as without it.
    """
    if isinstance(session, AsyncSession | AsyncConnection):
        return _publish_async(session, dict(
            topic=topic, body=body, outbox=outbox, tag=tag, keys=keys,
            message_group=message_group, headers=headers, tx_id=tx_id, state=state,
            at_commit=at_commit))
    conn = _connection(session)
    tx_id = tx_id or new_tx_id()
    if isinstance(keys, str):
        key_text: str | None = keys
    else:
        key_text = " ".join(keys) if keys else None
    now = datetime.now(UTC)
    values: dict[str, Any] = dict(
        tx_id=tx_id, producer_group=outbox.producer_group, topic=topic, tag=tag,
        keys=key_text, message_group=message_group, body=to_body(body, outbox.serializer),
        headers=with_trace_context(headers), state=state,
        created_at=now, next_attempt_at=now,
    )
    check_message(values, keys=keys, max_body_size=outbox.max_body_size)  # broker limits
    woken = False
    if not (at_commit and hold(conn, values)):  # held: it goes out with the COMMIT
        channel = _wake_channel(conn, outbox)
        _insert(conn, values, wake=channel)
        woken = channel is not None  # PostgreSQL delivers the wake-up with the commit
    if woken:
        pass  # no hook call for this row
    elif isinstance(session, Session):
        _remember(session, outbox, tx_id)
    else:
        remember_on_connection(conn, outbox.on_commit, tx_id)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("published %s to %s", tx_id, topic, extra={"tx_id": tx_id, "topic": topic})
    return tx_id


async def _publish_async(session: AsyncSession | AsyncConnection,
                         arguments: dict[str, Any]) -> str:
    """``publish()`` itself, run on the sync session or connection under ``session``."""
    _require_transaction(session)  # checked before run_sync, which would begin one

    def run(sync: Session | Connection) -> str:
        return publish(sync, **arguments)

    tx_id: str = await session.run_sync(run)
    return tx_id


def _wake_channel(conn: Connection, outbox: Outbox) -> str | None:
    """The channel to notify inside the transaction, if the outbox's hook asks for one.

    An ``on_commit`` hook with a ``wake_channel`` attribute
    (:class:`outbox.celery.hooks.WakeHook`) has its relays woken by PostgreSQL
    itself: the row's ``INSERT`` also calls ``pg_notify``, which PostgreSQL
    delivers when (and only if) the transaction commits, and the hook is not
    called for that row. Only on PostgreSQL. (A caller that hands ids to the
    hook by itself, as the Flask and Django units do, wakes the relays a
    second time: harmless.)
    """
    channel = getattr(outbox.on_commit, "wake_channel", None)
    if not isinstance(channel, str) or conn.dialect.name != "postgresql":
        return None
    return channel


def _insert(conn: Connection, values: dict[str, Any], *, wake: str | None = None) -> None:
    """Write the row now, with its own ``INSERT`` (calling ``pg_notify(wake)`` in it, the
    payload naming the row: :mod:`outbox.notified`)."""
    if conn.dialect.name == "postgresql":
        if values["message_group"] is not None:
            conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:g))"),
                         {"g": f"rocketbox:{values['message_group']}"})
        if conn.dialect.driver in _PYFORMAT_DRIVERS:
            if values["headers"] is not None:
                values["headers"] = json.dumps(values["headers"])
            if wake is None:
                conn.exec_driver_sql(_PG_INSERT, values)
            else:
                conn.exec_driver_sql(_PG_INSERT_WAKE, {
                    **values, "wake_channel": wake,
                    "wake_payload": wake_payload(values["tx_id"])}).close()
        else:
            # computed inside the INSERT: no extra round trip per message
            values["pg_xid"] = _XID
            values["seq"] = _SEQ
            statement = insert(transaction_table).values(**values)
            if wake is None:
                conn.execute(statement)
            else:
                conn.execute(statement.returning(
                    func.pg_notify(wake, wake_payload(values["tx_id"])))).close()
    else:
        values["seq"] = select(func.coalesce(func.max(transaction_table.c.seq), 0) + 1) \
            .scalar_subquery()
        conn.execute(insert(transaction_table).values(**values))


def _remember(session: Session, outbox: Outbox, tx_id: str) -> None:
    """Collect ids on the session; hand them to ``outbox.on_commit`` after commit.

    The listeners are added once per session and read the ids at event time.
    Rolling back a savepoint keeps the ids (those of the savepoint are then
    extra, and harmless: the relay finds no row for them); rolling back the
    whole transaction forgets them.
    """
    if outbox.on_commit is None:
        return
    pending: dict[Callable[[Sequence[str]], None], list[str]] = \
        session.info.setdefault(_PENDING_KEY, {})
    pending.setdefault(outbox.on_commit, []).append(tx_id)
    if not session.info.get(_HOOKED_KEY):
        session.info[_HOOKED_KEY] = True
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_soft_rollback", _after_soft_rollback)


def _after_commit(session: Session) -> None:
    pending: dict[Callable[[Sequence[str]], None], list[str]] = \
        session.info.pop(_PENDING_KEY, None) or {}
    if pending:
        call_hooks(pending)  # off the loop after an AsyncSession's commit


def _after_soft_rollback(session: Session, previous: SessionTransaction) -> None:
    if not previous.nested:
        session.info.pop(_PENDING_KEY, None)
