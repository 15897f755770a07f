"""Deprecated alias of :mod:`outbox.checkback_runner` (renamed in issue 30).

It holds the check-back responder process.
"""

from __future__ import annotations

from outbox._renamed import forwarder

__getattr__ = forwarder(__name__, "outbox.checkback_runner")
