"""Where the outbox publishes: the :class:`~outbox.targets.base.Target` seam and its targets.

:mod:`outbox.targets.base` is the seam (docs/targets.md),
:mod:`outbox.targets.runner` its sync face, and
:mod:`outbox.targets.broker_lite` broker_lite's native door.
:mod:`outbox.targets.address` registers the kinds of broker and
:mod:`outbox.targets.choose` loads a kind's ``TargetSupport`` (its publisher,
start-up probe and check-back responder): everything broker-specific lives in
this package, and nothing outside it asks which broker it is
(``tests/test_target_seam.py``).
"""

from __future__ import annotations

from outbox.targets import base as _base
from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfStored,
    LeftToCheckback,
    OutgoingMessage,
    Publisher,
    Target,
    TxEnd,
    TxEnded,
    TxState,
)
from outbox.targets.runner import ProcessPublishers, TargetPublisher

__all__ = ["EndOutcome", "HalfOutcome", "HalfStored", "LeftToCheckback", "OutgoingMessage",
           "ProcessPublishers", "Publisher", "Target", "TargetPublisher", "TxEnd", "TxEnded",
           "TxState"]


def __getattr__(name: str) -> object:
    """``LeftToCheckBack``, the deprecated old spelling of :class:`LeftToCheckback`."""
    if name == "LeftToCheckBack":
        return _base.__getattr__(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
