"""SQLite with concurrent writers: WAL, a busy timeout, and write locks taken up front.

The embedded setup has several processes writing one SQLite file: the web
app's requests, the relay's claims and records (a sweep every second), the
check-back responder. SQLite allows one writer at a time; used with its
defaults, a writer that finds the lock taken fails at once or after 5 s with
``database is locked``. Three things make it wait its turn instead:

* **WAL** (``PRAGMA journal_mode=WAL``): readers never block the writer and
  the writer never blocks readers; only writers queue. The mode is stored in
  the file, so one connection setting it is enough, but every connection
  asks (it costs nothing once set).
* **a busy timeout** (``PRAGMA busy_timeout``): a writer that finds the lock
  taken retries for this long instead of failing (:data:`BUSY_TIMEOUT`).
* **the write lock first** where a transaction reads and then writes: a
  deferred transaction that has read cannot wait for the lock (SQLite
  refuses at once, ``SQLITE_BUSY``, or in WAL ``SQLITE_BUSY_SNAPSHOT``,
  since waiting could deadlock or its snapshot is stale). ``BEGIN
  IMMEDIATE`` takes the write lock before the first read, where the busy
  timeout applies. The relay's claim does this (:meth:`outbox.relay.Relay.claim`);
  Django needs ``"OPTIONS": {"transaction_mode": "IMMEDIATE"}`` (Django 5.1+),
  which the ``rocketbox.W003`` check asks for.

:func:`tune_sqlite_engine` installs the pragmas on an engine's new
connections (:func:`outbox.migrate.engine_for` does it for every SQLite URL;
the Flask extension for a Flask-SQLAlchemy engine); :func:`apply_pragmas` does
it on one DB-API connection (the Django integration, on
``connection_created``).
"""

from __future__ import annotations

import logging
import sqlite3
import weakref
from typing import Any

from sqlalchemy import Engine, event

__all__ = ["BUSY_TIMEOUT", "apply_pragmas", "tune_sqlite_engine"]

#: seconds a SQLite writer waits for the write lock before ``database is locked``
BUSY_TIMEOUT = 30.0

log = logging.getLogger("rocketbox.sqlite")

_tuned: weakref.WeakSet[Engine] = weakref.WeakSet()


def apply_pragmas(dbapi_connection: Any, *, busy_timeout: float = BUSY_TIMEOUT) -> None:
    """Set the busy timeout and WAL on one sqlite3 connection (outside a transaction).

    Switching a file to WAL needs a moment with no other connection inside a
    transaction; when that does not come within the busy timeout the
    connection is used as it is (a warning says so) and the next one tries
    again: the mode, once set, stays in the file.
    """
    cursor = dbapi_connection.cursor()
    try:
        # the timeout first: switching to WAL needs a moment of exclusive access
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        try:
            cursor.execute("PRAGMA journal_mode = WAL")  # in-memory databases stay "memory"
        except sqlite3.OperationalError as exc:
            log.warning("could not switch the SQLite file to WAL yet: %s", exc)
    finally:
        cursor.close()


def tune_sqlite_engine(engine: Engine, *, busy_timeout: float = BUSY_TIMEOUT) -> Engine:
    """Apply :func:`apply_pragmas` to each new connection of a SQLite ``engine``.

    Other databases are left alone; tuning an engine twice adds nothing. The
    connections the engine's pool holds now were made without the pragmas:
    they are dropped (``Engine.dispose``; one checked out now is closed when it
    is returned), so every connection handed out from here on has them.
    Returns ``engine``.
    """
    if engine.dialect.name != "sqlite" or engine in _tuned:
        return engine
    _tuned.add(engine)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        apply_pragmas(dbapi_connection, busy_timeout=busy_timeout)

    event.listen(engine, "connect", on_connect)
    engine.dispose()
    return engine
