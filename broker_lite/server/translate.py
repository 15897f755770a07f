"""The native door's edge: the one body that is not the core's own value.

The native protocol's bodies *are* the core's values (both are the structs of
:mod:`broker_lite.values.messages`), so the handlers hand the core what they
decoded and write what it answered, with no copy; a pull's answer is also cut
to a frame as it is (:func:`broker_lite.server.fit.pull_body`). What is left
here is the heartbeat: its wire field ``consumers`` is the core's
``subscriptions``. The gRPC door has its own edge
(:mod:`broker_lite.grpc_door.convert`).
"""

from __future__ import annotations

from broker_lite.core import model
from broker_lite.protocol import messages as m

__all__ = ["registration_in"]


def registration_in(request: m.HeartbeatRequest) -> model.ClientRegistration:
    return model.ClientRegistration(client_id=request.client_id,
                                    producer_groups=request.producer_groups,
                                    subscriptions=request.consumers)
