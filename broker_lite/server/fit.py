"""How many messages fit in one response frame (pulls, key lookups, browsing)."""

from __future__ import annotations

from broker_lite.protocol import encode
from broker_lite.protocol import messages as m

__all__ = ["RESPONSE_OVERHEAD", "fit"]

#: room for the frame header and the fields around the messages of a response
RESPONSE_OVERHEAD = 1024


def fit(messages: list[m.DeliveredMessage], limit: int) -> int:
    """How many of ``messages``, from the first, fit in a frame of ``limit`` bytes."""
    used = RESPONSE_OVERHEAD
    for i, message in enumerate(messages):
        used += len(encode(message))
        if used > limit:
            return i
    return len(messages)
