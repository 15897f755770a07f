"""broker_lite's second door: the Apache RocketMQ 5 gRPC ``MessagingService``.

It lets the official RocketMQ 5 clients (``rocketmq-python-client`` and the
others speaking ``apache.rocketmq.v2``) produce, consume and run transactions
on a broker_lite, over the same :class:`~broker_lite.core.Broker` as the
native door, so messages cross between the doors with the same ids, keys,
tags and properties. The protobuf messages and the service table come from
the official client package (``rocketmq.grpc_protocol``); no ``.proto`` or
generated code lives in this repository. See ``docs/grpc.md``.

Modules, by idea:

- :mod:`~broker_lite.grpc_door.service`: the servicer, one method per RPC;
- :mod:`~broker_lite.grpc_door.door`: the shared state (:class:`GrpcDoor`);
- :mod:`~broker_lite.grpc_door.auth`: client id, ``MQv2-HMAC-SHA1``, the ACL;
- :mod:`~broker_lite.grpc_door.route`: QueryRoute, QueryAssignment;
- :mod:`~broker_lite.grpc_door.send`: SendMessage, EndTransaction;
- :mod:`~broker_lite.grpc_door.receive`: ReceiveMessage, AckMessage,
  ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue;
- :mod:`~broker_lite.grpc_door.pop`: the in-memory receive/ack state;
- :mod:`~broker_lite.grpc_door.pop_entries`: its entries and receipt handles;
- :mod:`~broker_lite.grpc_door.pop_state`: ``pop.json``, what is in flight across a restart;
- :mod:`~broker_lite.grpc_door.telemetry`: Telemetry (settings, check-back),
  Heartbeat, NotifyClientTermination;
- :mod:`~broker_lite.grpc_door.settings`: clients and their settings;
- :mod:`~broker_lite.grpc_door.convert`: protobuf <-> core structs;
- :mod:`~broker_lite.grpc_door.status`: errors -> ``Status`` codes;
- :mod:`~broker_lite.grpc_door.proxy_mode`: ``--grpc-proxy-semantics``, the door as
  strict as RocketMQ's proxy (docs/grpc-proxy-semantics.md);
- :mod:`~broker_lite.grpc_door.transaction_data`: its in-memory transaction data.

The door needs the ``rocketmq`` extra (grpcio, protobuf, the official client).
The names below load on first use (PEP 562), so ``broker-lite serve`` reads
:class:`GrpcDoorConfig` on a plain install, where only the native door runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker_lite.grpc_door.config import GrpcDoorConfig
    from broker_lite.grpc_door.door import GrpcDoor
    from broker_lite.grpc_door.service import MessagingService, add_to_server
    from broker_lite.grpc_door.status import GrpcDoorError

__all__ = ["GrpcDoor", "GrpcDoorConfig", "GrpcDoorError", "MessagingService", "add_to_server"]

#: public name -> the module that defines it (imported on first use)
_HOME = {
    "GrpcDoor": "broker_lite.grpc_door.door",
    "GrpcDoorConfig": "broker_lite.grpc_door.config",
    "GrpcDoorError": "broker_lite.grpc_door.status",
    "MessagingService": "broker_lite.grpc_door.service",
    "add_to_server": "broker_lite.grpc_door.service",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
