"""The audit's one error: bad usage or an input that is not there (exit code 2)."""

from __future__ import annotations

__all__ = ["AuditInputError"]


class AuditInputError(Exception):
    """An argument, a database, a table or a directory the audit cannot use.

    The message is one line naming what is wrong; ``main`` prints it and exits 2.
    """
