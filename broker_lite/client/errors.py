"""Errors only the client raises, as subclasses of :mod:`broker_lite.errors`.

Everything a broker answers with is mapped back to the server's own class by
:func:`broker_lite.errors.error_for_code`, so ``except TopicNotFoundError``
works the same on both sides. The client adds three::

    BrokerError
    ├── ClientClosedError             the client was shut down (or never started)
    ├── BatchSendError                some items of a batch failed; ``outcomes``
    │                                 has a SendResult or an error per item
    └── UnavailableError              (retriable)
        └── BrokerUnavailableError    cannot connect, or the connection was lost
                                      while the request was in flight
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker_lite.errors import BrokerError, ResponseCode, UnavailableError

if TYPE_CHECKING:
    from broker_lite.client.message import SendResult

__all__ = ["BatchSendError", "BrokerUnavailableError", "ClientClosedError"]


class BrokerUnavailableError(UnavailableError):
    """The broker cannot be reached, or the connection broke mid-request.

    A request that was written before the connection broke may or may not
    have been carried out by the broker: sending it again is safe for reads,
    acks and transactional halves (which the broker de-duplicates by id), and
    may duplicate a plain message.
    """

    code = ResponseCode.SERVICE_NOT_AVAILABLE

    def __init__(self, message: str, *, server: str = "") -> None:
        super().__init__(message)
        self.server = server


class ClientClosedError(BrokerError):
    """The client was shut down, or used before ``start()``."""

    retriable = False


class BatchSendError(BrokerError):
    """Some messages of ``send_batch`` were refused; the others were stored.

    ``outcomes`` has one entry per message, in order: the :class:`SendResult`
    of a stored message, or the error that refused it. The batch is retriable
    when every refusal is.
    """

    def __init__(self, outcomes: Sequence[SendResult | BrokerError]) -> None:
        errors = [o for o in outcomes if isinstance(o, BrokerError)]
        first = errors[0] if errors else None
        super().__init__(
            f"{len(errors)} of {len(outcomes)} messages of the batch were refused"
            + (f"; first: {first}" if first is not None else ""),
            retriable=bool(errors) and all(e.retriable for e in errors),
        )
        self.outcomes = list(outcomes)

    @property
    def errors(self) -> list[tuple[int, BrokerError]]:
        """``(index, error)`` of each refused message."""
        return [(i, o) for i, o in enumerate(self.outcomes) if isinstance(o, BrokerError)]
