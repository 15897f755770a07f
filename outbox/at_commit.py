"""Outbox rows sent with the ``COMMIT``: the message and the commit in one round trip.

A row written with its own ``INSERT`` costs a network round trip to
PostgreSQL on top of the transaction's ``COMMIT``. A row that is added last,
right before the commit (the decorator's ``body=`` message, or
``publish(..., at_commit=True)``), can instead travel with the commit::

    SELECT rocketbox_publish('6F1C...', 'rocketbox', 'Orders', ...); COMMIT

one simple-protocol query, sent from SQLAlchemy's ``commit`` connection
event, after every flush and ``before_commit`` listener has run, straight
to psycopg (SQLAlchemy's ``before_cursor_execute`` listeners and ``echo`` do
not see it; errors are wrapped in SQLAlchemy's ``DBAPIError`` classes). The row is
in the same transaction as everything else, so atomicity is unchanged: if
the function or the commit fails, nothing commits and the error is raised
from ``commit()``. psycopg 3 then finds the server idle and its own
``commit()`` sends nothing.

``rocketbox_publish()`` is a PL/pgSQL function created by migration 0002; it
does what :func:`outbox.publish.publish` does on PostgreSQL (the group's
advisory lock, ``seq`` from the sequence, ``pg_xid``), and PostgreSQL keeps
its plan per session, so nothing is parsed or planned again per message.
Values are sent as SQL string literals that read the same whatever
``standard_conforming_strings`` says when the query runs: quotes doubled,
and a value with a backslash written as an escape string (``E'...'``,
backslashes doubled); the body as hex, through ``decode(..., 'hex')``.
``publish()`` checks that the connection's encoding can hold the call, so
such a value fails there.

A row rides on the commit only when all of this holds, and is written at
once otherwise (the same row, one round trip more):

* PostgreSQL through psycopg 3 (sync, or its async driver under an
  ``AsyncSession``/``AsyncConnection``: the row is then sent with an awaited
  call from inside SQLAlchemy's greenlet), not in autocommit, not in pipeline mode
  (there psycopg always uses the extended protocol, which takes one
  statement per query);
* no text value holds a NUL character (the plain ``INSERT`` then refuses it);
* the function exists (checked once per engine);
* the connection is in its root transaction: no savepoint, not two-phase;
* the execution option ``rocketbox_at_commit`` is not ``False`` (set it on an
  engine whose transactions are committed by someone else, as Django's
  borrowed engine in :mod:`integrations.django.db` does).

The transaction has to be committed through SQLAlchemy
(``Session.commit()``, ``Connection.commit()``, ``engine.begin()``): that is
what sends the row. Rolling back drops it. If sending fails, the
transaction is rolled back on the spot (see :func:`_end_transaction`) and
``commit()`` raises. An engine-level ``commit`` listener added after
rocketbox's first held row runs after the ``COMMIT`` has gone out: if it
raises, ``commit()`` raises although the transaction committed.
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import TwoPhaseTransaction
from sqlalchemy.exc import DBAPIError
from sqlalchemy.util import await_only

__all__ = ["FUNCTION", "OPTION", "can_ride", "hold", "queued"]

log = logging.getLogger("rocketbox.outbox")

#: the function's name and argument types, as ``to_regprocedure`` takes them
FUNCTION = ("rocketbox_publish(text, text, text, text, text, text, bytea, json, text, "
            "timestamptz)")
#: execution option: ``False`` writes rows at once on this engine or connection
OPTION = "rocketbox_at_commit"
#: the values the function takes, in its argument order
ARGUMENTS = ("tx_id", "producer_group", "topic", "tag", "keys", "message_group", "body",
             "headers", "state", "created_at")

_lock = threading.Lock()
_function_present: weakref.WeakKeyDictionary[Engine, bool] = weakref.WeakKeyDictionary()
_hooked: weakref.WeakSet[Engine] = weakref.WeakSet()
_rows: weakref.WeakKeyDictionary[Connection, list[str]] = \
    weakref.WeakKeyDictionary()


def can_ride(conn: Connection) -> bool:
    """Whether a row for ``conn``'s transaction can be sent with its ``COMMIT``."""
    if conn.dialect.name != "postgresql" or conn.dialect.driver != "psycopg":
        return False
    if conn.in_nested_transaction() or isinstance(conn.get_transaction(), TwoPhaseTransaction):
        return False
    if conn.get_execution_options().get(OPTION, True) is False:
        return False
    raw = _psycopg(conn)
    if getattr(raw, "autocommit", False):
        return False  # every statement commits by itself: no COMMIT to ride on
    if raw.pgconn.pipeline_status:  # 0 (off) too where libpq has no pipelines
        return False
    return _has_function(conn)


def _psycopg(conn: Connection) -> Any:
    """The ``psycopg.Connection`` (or ``AsyncConnection``) under ``conn``."""
    return conn.connection.driver_connection


def _has_function(conn: Connection) -> bool:
    engine = conn.engine
    present = _function_present.get(engine)
    if present is None:
        present = bool(conn.exec_driver_sql(
            "SELECT to_regprocedure(%(f)s) IS NOT NULL", {"f": FUNCTION}).scalar())
        with _lock:
            _function_present[engine] = present
        if not present:
            log.info("%s is missing (database not migrated to 0002): outbox rows are "
                     "written with their own INSERT", FUNCTION.split("(")[0])
    return present


def hold(conn: Connection, values: Mapping[str, Any]) -> bool:
    """Hold the row (``values``: its columns by name) for ``conn``'s ``COMMIT``.

    Returns ``False``, holding nothing, when the row cannot ride (see the
    module doc); the caller then writes it at once. A text value with a NUL
    character is not held either: the plain ``INSERT`` refuses it with
    PostgreSQL's own error, where a literal would cut it short (libpq's query
    text ends at a NUL). The call is built here, and checked against the
    connection's encoding, so bad input (headers that are not JSON, a value
    the encoding cannot hold) fails in ``publish()``, not in ``commit()``.
    """
    if not can_ride(conn):
        return False
    if any(isinstance(values[name], str) and "\x00" in values[name] for name in ARGUMENTS):
        return False
    call = _call(values)
    # a value the encoding cannot hold fails here, not at COMMIT
    call.encode(_psycopg(conn).info.encoding)
    engine = conn.engine
    if engine not in _hooked:
        with _lock:
            if engine not in _hooked:
                event.listen(engine, "commit", _send_with_commit)
                event.listen(engine, "rollback", _drop)
                _hooked.add(engine)
    _rows.setdefault(conn, []).append(call)
    return True


def queued(conn: Connection) -> int:
    """How many rows wait for ``conn``'s commit."""
    return len(_rows.get(conn, ()))


def _drop(conn: Connection) -> None:
    _rows.pop(conn, None)


def _send_with_commit(conn: Connection) -> None:
    calls = _rows.pop(conn, None)
    if not calls:
        return
    dbapi: Any = conn.connection.dbapi_connection
    raw = _psycopg(conn)
    base_error = conn.dialect.loaded_dbapi.Error
    try:
        # straight to psycopg: a query without parameters goes out with the simple
        # protocol, which allows several statements in one message; never prepared
        sent = raw.execute("; ".join([*calls, "COMMIT"]), prepare=False)
        if conn.dialect.is_async:  # in AsyncSession.commit()'s greenlet: await it there
            await_only(sent)
    except BaseException as exc:
        invalidated = isinstance(exc, base_error) and conn.dialect.is_disconnect(
            exc, dbapi, None)
        _end_transaction(conn, dbapi, invalidated)
        if isinstance(exc, base_error):
            # the values stay out of the message (they may be large or private)
            shown = f"SELECT rocketbox_publish(...) x{len(calls)}; COMMIT"
            raise DBAPIError.instance(shown, None, exc, base_error, hide_parameters=True,
                                      connection_invalidated=invalidated,
                                      dialect=conn.dialect) from exc
        raise
    log.debug("sent %d outbox row(s) with the COMMIT", len(calls))


def _end_transaction(conn: Connection, dbapi: Any, invalidated: bool) -> None:
    """After a failed send, make sure no transaction is left open on the connection.

    SQLAlchemy counts a commit that raised as the end of the transaction and
    sends no ROLLBACK afterwards. A failure inside ``rocketbox_publish()``
    leaves the server in a failed transaction (the ``COMMIT`` was not run),
    and one before anything was sent leaves it in an open one with the
    business rows in it; either way it is rolled back here, and a connection
    that cannot even do that is invalidated, so the pool never hands out a
    transaction that a later commit would finish without its outbox row.
    """
    from psycopg.pq import TransactionStatus

    if not invalidated:
        try:
            if _psycopg(conn).info.transaction_status != TransactionStatus.IDLE:
                dbapi.rollback()  # SQLAlchemy's async adapter awaits it in the greenlet
            return
        except Exception:
            log.warning("could not roll back after a failed commit; dropping the connection",
                        exc_info=True)
    conn.invalidate()


def _literal(value: str | None) -> str:
    """``value`` as a SQL string literal that reads the same with either setting of
    ``standard_conforming_strings`` (NULs never get here: see :func:`hold`)."""
    if value is None:
        return "NULL"
    quoted = value.replace("'", "''")
    if "\\" in quoted:
        return "E'" + quoted.replace("\\", "\\\\") + "'"
    return "'" + quoted + "'"


def _call(row: Mapping[str, Any]) -> str:
    """``SELECT rocketbox_publish(...)`` for one row, every value a literal."""
    body: bytes = row["body"]
    headers = row["headers"]
    created: datetime = row["created_at"]
    return (f"SELECT rocketbox_publish({_literal(row['tx_id'])}, "
            f"{_literal(row['producer_group'])}, {_literal(row['topic'])}, "
            f"{_literal(row['tag'])}, {_literal(row['keys'])}, "
            f"{_literal(row['message_group'])}, decode('{body.hex()}', 'hex'), "
            f"{_literal(None if headers is None else json.dumps(headers))}::json, "
            f"{_literal(row['state'])}, '{created.isoformat()}'::timestamptz)")
