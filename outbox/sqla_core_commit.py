"""``Outbox.on_commit`` for ``publish()`` on a Core ``Connection``, as for a Session.

An ORM Session has an ``after_commit`` event; a Core ``Connection`` has only
``commit``, which fires *before* the ``COMMIT`` goes out (a relay task
enqueued there could run before the rows are visible). So the ids go through
three steps, kept in ``Connection.info`` (the DBAPI connection's own dict):

1. ``publish()`` adds them to the *pending* ids of the connection;
2. its ``commit`` event moves them to the *committed* ids (``rollback``
   drops the pending ones);
3. the hook is called with the committed ids at the first moment the commit
   is known to be over: the connection going back to the pool (the end of
   ``with engine.begin() as conn``) or its next transaction beginning (a
   ``conn.commit()`` followed by more work).

A connection that commits and then sits idle outside the pool calls the hook
late, at its next use; the sweeper relays the rows meanwhile. A commit that
fails after step 2 hands the hook ids with no committed row: the relay finds
nothing for them (harmless, as for a Session's rolled-back savepoint).

Code that calls the hook itself (rocketbox's Flask and Django units) sets the
execution option ``rocketbox_on_commit=False`` on its connection, which
leaves the connection to it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Engine, event

__all__ = ["OPT_OUT", "call_hooks", "remember"]

log = logging.getLogger("rocketbox.outbox")

#: execution option: ``False`` leaves ``on_commit`` to the caller
OPT_OUT = "rocketbox_on_commit"
_PENDING = "rocketbox.core_pending"
_COMMITTED = "rocketbox.core_committed"

Hook = Callable[[Sequence[str]], None]
_hooked: weakref.WeakSet[Engine] = weakref.WeakSet()
_lock = threading.Lock()


def remember(conn: Connection, hook: Hook | None, tx_id: str) -> None:
    """Call ``hook`` with ``tx_id`` once ``conn``'s transaction has committed."""
    if hook is None or conn.get_execution_options().get(OPT_OUT) is False:
        return
    _listen(conn.engine)
    pending: dict[Hook, list[str]] = conn.info.setdefault(_PENDING, {})
    pending.setdefault(hook, []).append(tx_id)


def _listen(engine: Engine) -> None:
    if engine in _hooked:
        return
    with _lock:
        if engine in _hooked:
            return
        event.listen(engine, "commit", _committing)
        event.listen(engine, "rollback", _rolled_back)
        event.listen(engine, "begin", _began)
        event.listen(engine.pool, "checkin", _checked_in)
        _hooked.add(engine)


def _committing(conn: Connection) -> None:
    pending: dict[Hook, list[str]] | None = conn.info.pop(_PENDING, None)
    if pending:
        committed: dict[Hook, list[str]] = conn.info.setdefault(_COMMITTED, {})
        for hook, ids in pending.items():
            committed.setdefault(hook, []).extend(ids)


def _rolled_back(conn: Connection) -> None:
    conn.info.pop(_PENDING, None)


def _began(conn: Connection) -> None:
    _call_hooks(conn.info)


def _checked_in(dbapi_connection: Any, record: Any) -> None:
    if record is not None:
        _call_hooks(record.info)


def _call_hooks(info: dict[Any, Any]) -> None:
    """The committed ids go to their hooks; pending ids of a transaction that ended
    outside SQLAlchemy's sight are dropped (they were never seen committing)."""
    info.pop(_PENDING, None)
    committed: dict[Hook, list[str]] | None = info.pop(_COMMITTED, None)
    if committed:
        call_hooks(committed)


def call_hooks(pending: Mapping[Hook, Sequence[str]]) -> None:
    """Call each hook with its ids; a failure is logged, never raised.

    On the thread of a running event loop (an ``AsyncSession`` or
    ``AsyncConnection`` committed: SQLAlchemy runs its events there), the
    hooks run in the loop's default executor instead, since a hook may block
    (the Celery enqueue is network I/O).
    """
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        loop.run_in_executor(None, _run, dict(pending))
    else:
        _run(pending)


def _run(pending: Mapping[Hook, Sequence[str]]) -> None:
    for hook, ids in pending.items():
        try:
            hook(list(ids))
        except Exception:  # the sweeper relays these rows later
            log.exception("on_commit hook failed for %d message(s); the sweeper will "
                          "relay them", len(ids))
