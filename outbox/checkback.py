"""Deprecated alias of :mod:`outbox.checkback_rules` (renamed in issue 30).

It holds the one check-back rule set.
"""

from __future__ import annotations

from outbox._renamed import forwarder

__getattr__ = forwarder(__name__, "outbox.checkback_rules")
