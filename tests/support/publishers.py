"""Publishers at the relay's seam: a pass-through to subclass, and a one-call drain.

:class:`PassThrough` hands every call to the publisher it wraps; a test double
subclasses it and overrides only the step it watches or breaks (the halves
sent, the ends). :class:`AfterHalves` runs a step of the test's own between
the halves and the ends (a crash there, say). :func:`drain` relays every due row now through a fresh
:class:`~outbox.BrokerLitePublisher` (or the one given) and closes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from outbox import BrokerLitePublisher, Outbox, Relay, RelayReport
from outbox.targets import EndOutcome, HalfOutcome, OutgoingMessage, Publisher, TxEnd

__all__ = ["AfterHalves", "PassThrough", "drain"]


class PassThrough:
    """A :class:`~outbox.targets.Publisher` that hands every call to ``inner``."""

    def __init__(self, inner: Publisher) -> None:
        self.inner = inner

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        return self.inner.send_halves(messages)

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        return self.inner.end_transactions(ends)

    def close(self) -> None:
        self.inner.close()


class AfterHalves(PassThrough):
    """Sends the halves through ``inner``, then calls ``then(messages)`` before the
    outcomes go back to the relay: the moment between a half and its end."""

    def __init__(self, inner: Publisher,
                 then: Callable[[Sequence[OutgoingMessage]], None]) -> None:
        super().__init__(inner)
        self.then = then

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        result = self.inner.send_halves(messages)
        self.then(messages)
        return result


def drain(outbox: Outbox, publisher: Publisher | None = None) -> RelayReport:
    """``Relay(outbox, publisher).drain()``; a new BrokerLitePublisher unless one is given.

    The publisher is closed afterwards either way.
    """
    publisher = publisher if publisher is not None else BrokerLitePublisher(outbox)
    try:
        return Relay(outbox, publisher).drain()
    finally:
        publisher.close()
