"""Where the outbox publishes: the :class:`~outbox.targets.base.Target` seam and its targets.

:mod:`outbox.targets.base` is the seam (docs/targets.md),
:mod:`outbox.targets.runner` its sync face, and
:mod:`outbox.targets.broker_lite` broker_lite's native door.
"""

from __future__ import annotations

from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfStored,
    LeftToCheckBack,
    OutgoingMessage,
    Publisher,
    Target,
    TxEnd,
    TxEnded,
    TxState,
)
from outbox.targets.runner import ProcessPublishers, TargetPublisher

__all__ = ["EndOutcome", "HalfOutcome", "HalfStored", "LeftToCheckBack", "OutgoingMessage",
           "ProcessPublishers", "Publisher", "Target", "TargetPublisher", "TxEnd", "TxEnded",
           "TxState"]
