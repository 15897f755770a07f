"""broker_lite: a Python broker that reproduces RocketMQ's transactional messages.

Layers, imports pointing down only: ``storage`` (files), the broker core,
``protocol`` (framing, no I/O), and ``server`` / ``client`` (asyncio and sockets).
"""

from __future__ import annotations

from broker_lite.errors import BrokerError

__all__ = ["BrokerError"]
__version__ = "0.1.0"
