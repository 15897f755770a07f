"""Running a broker process: both doors over one core, the periodic work, shutdown.

The composition root of broker_lite, above both doors
(:mod:`broker_lite.server`, :mod:`broker_lite.grpc_door`), which do not know
each other: :class:`BrokerRuntime` binds and starts them over one
:class:`~broker_lite.serving.ServerContext`, runs the broker's periodic work
(:mod:`~broker_lite.runtime.periodic`) and shuts down gracefully;
:func:`serve` is what ``broker-lite serve`` runs.
"""

from __future__ import annotations

from broker_lite.runtime.broker_runtime import (
    BindRefused,
    BrokerRuntime,
    check_bind_policy,
    is_loopback,
    serve,
)

__all__ = ["BindRefused", "BrokerRuntime", "check_bind_policy", "is_loopback", "serve"]
