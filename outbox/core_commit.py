"""Deprecated alias of :mod:`outbox.sqla_core_commit` (renamed in issue 30).

It holds on_commit for a SQLAlchemy Core connection.
"""

from __future__ import annotations

from outbox._renamed import forwarder

__getattr__ = forwarder(__name__, "outbox.sqla_core_commit")
