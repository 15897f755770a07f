"""Deprecated alias of :mod:`outbox.log_setup` (renamed in issue 30).

It holds structured log set-up; the old name shadowed the stdlib.
"""

from __future__ import annotations

from outbox._renamed import forwarder

__getattr__ = forwarder(__name__, "outbox.log_setup")
