"""What both network doors share, below either of them.

The native door (:mod:`broker_lite.server`) and the gRPC door
(:mod:`broker_lite.grpc_door`) are peers: neither imports the other. What
they both need lives here:

- :mod:`~broker_lite.serving.context`: the doors' settings
  (:class:`ServerConfig`) and the live objects of one running broker
  (:class:`ServerContext`), and the :class:`Session` a request arrived on;
- :mod:`~broker_lite.serving.durability` and
  :mod:`~broker_lite.serving.flushgate`: sync-flush acknowledgements;
- :mod:`~broker_lite.serving.longpoll` and :mod:`~broker_lite.serving.waiters`:
  waiting for new messages (:class:`ArrivalHub` for the native door's pulls;
  the gRPC door's receives wait on the same ``KeyedWaiters``, per topic);
- :mod:`~broker_lite.serving.operations`: the operators' requests (consumer
  groups, stats, pending halves, browse, resend); their summaries as the
  native protocol's structs, a browse as the core's
  :class:`~broker_lite.core.model.PullResult`.

:mod:`broker_lite.runtime` starts both doors over one of these contexts.
"""

from __future__ import annotations

from broker_lite.serving.context import MAX_LONG_POLL_MS, ServerConfig, ServerContext, Session
from broker_lite.serving.durability import flush_future, flush_outcome, wait_flushed
from broker_lite.serving.flushgate import FlushGate, FlushTimeout
from broker_lite.serving.longpoll import ArrivalHub

__all__ = [
    "MAX_LONG_POLL_MS",
    "ArrivalHub",
    "FlushGate",
    "FlushTimeout",
    "ServerConfig",
    "ServerContext",
    "Session",
    "flush_future",
    "flush_outcome",
    "wait_flushed",
]
