"""broker_lite's native door: the pipelined binary protocol, served by asyncio.

- :mod:`~broker_lite.server.native`: the listening socket and one
  :class:`~broker_lite.server.connection.Connection` per client; frequent
  requests are served inline in its reader loop and a task only for what waits;
- :mod:`~broker_lite.server.handlers`: one coroutine per request code;
- :mod:`~broker_lite.server.checkback`: check-back requests to producers.

The gRPC door (:mod:`broker_lite.grpc_door`) is its peer; what both use
(settings, the running context, long polls, sync-flush acknowledgements) is in
:mod:`broker_lite.serving`, and :mod:`broker_lite.runtime` starts both.
Access control lives in :mod:`broker_lite.core.acl`, shared by both doors.
"""

from __future__ import annotations

from broker_lite.server.native import NativeServer

__all__ = ["NativeServer"]
