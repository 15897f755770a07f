"""Which part a relay fault is in, and whether waiting can fix it.

A pass that fails as a whole fails because of the **broker** (a
:class:`~outbox.errors.RelayError`: unreachable, timed out) or the
**database** (SQLAlchemy's ``OperationalError``: refused, gone away, locked).
Both are transient: the relay tries again. One database fault is not: the
outbox tables are missing (a database never migrated, or migrated down under
a running relay). Retrying that only fills the log, so :func:`classify` says
so, and the sweeper stops the worker with that reason instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from outbox.errors import RelayError

__all__ = ["Fault", "classify"]

#: what drivers say when a table is not there (SQLite; PostgreSQL's UndefinedTable)
_MISSING_TABLE = ("no such table", "undefinedtable")


@dataclass(frozen=True, slots=True)
class Fault:
    """``component`` ("broker" or "database"), ``transient``, and one line saying what."""

    component: str
    transient: bool
    text: str


def _first_line(exc: BaseException) -> str:
    inner = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(inner).splitlines() if line.strip()]
    return lines[0] if lines else type(inner).__name__


def classify(exc: BaseException) -> Fault | None:
    """The fault ``exc`` is, or None for an error that is neither (a bug: not retried)."""
    if isinstance(exc, RelayError):
        return Fault("broker", True, _first_line(exc))
    if isinstance(exc, SQLAlchemyError):
        text = _first_line(exc)
        name = type(getattr(exc, "orig", None)).__name__.lower()
        if any(m in text.lower() or m in name for m in _MISSING_TABLE):
            return Fault("database", False,
                         f"the outbox tables are missing ({text}): run `rocketbox migrate`")
        return Fault("database", True, text)
    return None
