"""The audit's error tree, and the cause of a Java exception in one line.

Everything the audit raises itself derives from :class:`AuditError`, grouped
by what the caller does next (Spark's and the JDBC drivers' own exceptions are
turned into these at the edge, with :func:`java_cause` for their message)::

    AuditError
    │
    │  fix the input: an argument, or a database, table or directory to read
    └── AuditInputError       one line naming what is wrong (exit code 2):
                              ``argument`` when one command-line argument is to blame
"""

from __future__ import annotations

from typing import Any

from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]

__all__ = ["AuditError", "AuditInputError", "java_cause"]

#: Java exceptions whose message names the cause (the drivers', the sockets')
_CAUSES = ("java.sql.SQLException", "java.io.IOException")


class AuditError(Exception):
    """Root of the audit's own errors."""


class AuditInputError(AuditError):
    """An argument, a database, a table or a directory the audit cannot use.

    The message is one line naming what is wrong; ``main`` prints it and exits 2.
    """

    def __init__(self, message: str, *, argument: str = "") -> None:
        super().__init__(message)
        self.argument = argument


def _chain(throwable: Any) -> list[Any]:
    found: list[Any] = []
    while throwable is not None and len(found) < 32 and throwable not in found:
        found.append(throwable)
        throwable = throwable.getCause()
    return found


def _is_a(throwable: Any, names: tuple[str, ...]) -> bool:
    cls = throwable.getClass()
    while cls is not None:
        if cls.getName() in names:
            return True
        cls = cls.getSuperclass()
    return False


def _message(throwable: Any) -> str:
    text = str(throwable.getMessage() or "").strip()
    return text.splitlines()[0] if text else ""


def java_cause(exc: BaseException) -> str:
    """The cause of a failed Spark call, one line.

    Spark wraps a JDBC driver's error in its own (``[FAILED_JDBC...] ... SQLSTATE:
    HV000``); this walks the Java cause chain and returns the first SQL or I/O
    exception's message (PostgreSQL's ``FATAL: database "x" does not exist``),
    else the deepest message, else the Python text's first line.
    """
    origin = getattr(exc, "_origin", None)  # pyspark's CapturedException
    if origin is None and isinstance(exc, Py4JJavaError):
        origin = exc.java_exception
    if origin is not None:
        chain = _chain(origin)
        for throwable in chain:  # Spark's own wrappers may be SQLExceptions too: skip them
            spark_own = str(throwable.getClass().getName()).startswith("org.apache.spark.")
            if not spark_own and _is_a(throwable, _CAUSES) and _message(throwable):
                return _message(throwable)
        for throwable in reversed(chain):
            if _message(throwable):
                return _message(throwable)
    text = str(exc).strip() or type(exc).__name__
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("java.", "org.", "py4j.")) and ": " in line:
            return line.split(": ", 1)[1]
        if line:
            return line
    return text
