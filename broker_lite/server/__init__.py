"""broker_lite's network doors over one :class:`~broker_lite.core.Broker`.

- :mod:`~broker_lite.server.native`: the native, pipelined binary protocol
  (:mod:`broker_lite.protocol`) served by asyncio; one
  :class:`~broker_lite.server.connection.Connection` per client, frequent
  requests served inline in its reader loop and a task only for what waits,
  long polling (:mod:`~broker_lite.server.longpoll`), sync-flush
  acknowledgements (:mod:`~broker_lite.server.flushgate`), and check-back
  requests to producers (:mod:`~broker_lite.server.checkback`).
- the gRPC door: a ``grpc.aio`` server serving the Apache RocketMQ v5
  ``MessagingService`` (:mod:`broker_lite.grpc_door`), so the official
  client works unchanged.
- :mod:`~broker_lite.server.runtime`: starts both doors and the broker's
  periodic work (:mod:`~broker_lite.server.periodic`), and shuts down
  gracefully on SIGTERM.

Access control lives in :mod:`broker_lite.core.acl`, shared by both doors.
"""

from __future__ import annotations

from broker_lite.server.context import MAX_LONG_POLL_MS, ServerConfig, ServerContext, Session
from broker_lite.server.longpoll import ArrivalHub
from broker_lite.server.native import NativeServer
from broker_lite.server.runtime import (
    BindRefused,
    BrokerRuntime,
    check_bind_policy,
    is_loopback,
    serve,
)

__all__ = [
    "MAX_LONG_POLL_MS",
    "ArrivalHub",
    "BindRefused",
    "BrokerRuntime",
    "NativeServer",
    "ServerConfig",
    "ServerContext",
    "Session",
    "check_bind_policy",
    "is_loopback",
    "serve",
]
