"""The core's model: the values that cross the :class:`~broker_lite.core.Broker` API.

They are defined once, in the leaf :mod:`broker_lite.values.messages`, and are
also the native protocol's bodies (:mod:`broker_lite.protocol.messages` names
them by their wire names), so the native door hands the core what it decoded
and writes what the core answered, with no copy. This module re-exports them
under the core's name; the gRPC door translates to and from them at its edge
(:mod:`broker_lite.grpc_door.convert`).
"""

from __future__ import annotations

from broker_lite.values import messages as _leaf
from broker_lite.values.messages import *  # noqa: F403

__all__ = _leaf.__all__
