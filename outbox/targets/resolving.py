"""Telling a host that does not resolve from an outage, for the targets' start-up probes.

A name that does not resolve is a setup that can never work (a
:class:`~outbox.errors.ConfigurationError` naming the broker setting); a refused
or dropped connection is an outage to retry. Clients wrap the resolver's error
in their own, so :func:`resolve_error` walks the cause chain for it.
"""

from __future__ import annotations

import socket

__all__ = ["no_such_host"]

#: how deep a client may wrap the resolver's error
_MAX_CHAIN = 10


#: the resolver's answers that mean the name does not exist (not a resolver outage)
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def no_such_host(exc: BaseException) -> socket.gaierror | None:
    """The resolver's "no such host" behind ``exc`` (its causes or contexts), or None (any
    other fault, a resolver that could not be asked among them)."""
    found = _resolve_error(exc)
    return found if found is not None and found.errno in _NO_SUCH_HOST else None


def _resolve_error(exc: BaseException) -> socket.gaierror | None:
    seen: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if seen is None:
            return None
        if isinstance(seen, socket.gaierror):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
