"""How a row's end reaches broker_lite, and what its answer means to the seam.

The vocabulary the native-door target (:mod:`outbox.targets.broker_lite`),
its check-back responder (:mod:`outbox.targets.broker_lite_checkback`) and
the seed API's ``half_first`` share:

* :data:`LOCAL_STATES` / :data:`STATE_NAMES`: a row's end state as
  broker_lite's client names it, and back (the one mapping);
* :func:`transaction_ends` and :func:`end_outcomes`: the seam's ends as the
  client's, and the client's answers as the seam's outcomes, one per end;
* :func:`row_fault` and :func:`refused`: a broker refusal of one row as the
  seam's :class:`~outbox.errors.RowRefusedError`, the broker's error its cause;
* :func:`producer_ender` and :class:`ProducerSeam`: ends (and halves) through
  the seed API's started sync producer.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker_lite.client import (
    LocalTransactionState,
    Message,
    Producer,
    SendResult,
    TransactionEnd,
    TransactionEndResult,
    TransactionProducer,
)
from broker_lite.errors import BrokerError, NoPermissionError, TopicNotFoundError, UnauthorizedError
from outbox.ending import Ender
from outbox.errors import RowFault, RowRefusedError
from outbox.targets.base import EndOutcome, HalfStored, LeftToCheckback, TxEnd, TxEnded, TxState

__all__ = ["LOCAL_STATES", "STATE_NAMES", "ProducerSeam", "end_outcomes", "producer_ender",
           "refused", "row_fault", "stored_half", "transaction_ends"]

#: a row's end state as broker_lite's client names it, and back: the one mapping
LOCAL_STATES: dict[TxState, LocalTransactionState] = {
    "COMMIT": LocalTransactionState.COMMIT_MESSAGE,
    "ROLLBACK": LocalTransactionState.ROLLBACK_MESSAGE,
    "UNKNOWN": LocalTransactionState.UNKNOW}
STATE_NAMES: dict[LocalTransactionState, TxState] = {v: k for k, v in LOCAL_STATES.items()}
#: broker errors that say the setup is wrong, not the row, and not for now
_CONFIG_ERRORS = (TopicNotFoundError, NoPermissionError, UnauthorizedError)


def row_fault(error: BrokerError) -> RowFault:
    """What a broker_lite refusal of one row says: transient, the setup, or the row."""
    if error.retriable:
        return RowFault.TRANSIENT
    return RowFault.CONFIG if isinstance(error, _CONFIG_ERRORS) else RowFault.ROW_INVALID


def refused(tx_id: str, error: BrokerError, target: str) -> RowRefusedError:
    """broker_lite's refusal of one row as the seam's error (the broker's is its cause)."""
    row_error = RowRefusedError(str(error), tx_id=tx_id, kind=row_fault(error), target=target)
    row_error.__cause__ = error
    return row_error


def transaction_ends(ends: Sequence[TxEnd]) -> list[TransactionEnd]:
    """The client's ends for the seam's: each half named by its offsets and ``tx_id``."""
    return [TransactionEnd(half.tx_id, LOCAL_STATES[end.state], half.half_offset,
                           half.queue_offset, half.tx_id)
            for end in ends for half in (end.half,)]


def end_outcomes(ends: Sequence[TxEnd], answers: Sequence[TransactionEndResult | BrokerError],
                 target: str) -> list[EndOutcome]:
    """The seam's outcomes for the client's answers, one per end."""
    outcomes: list[EndOutcome] = []
    for end, answer in zip(ends, answers, strict=True):
        if isinstance(answer, BrokerError):
            outcomes.append(refused(end.tx_id, answer, target))
        elif answer.outcome == "unknown":
            outcomes.append(LeftToCheckback(end.tx_id, "the broker left it to check-back"))
        else:
            outcomes.append(TxEnded(end.tx_id, answer.commit_log_offset))
    return outcomes


def stored_half(tx_id: str, topic: str, result: SendResult) -> HalfStored:
    """The seam's record of a half broker_lite stored (what the row keeps to end it)."""
    return HalfStored(tx_id, topic, result.commit_log_offset, result.queue_offset,
                      result.msg_id, result.transaction_id or "")


def producer_ender(producer: Producer) -> Ender:
    """Ends through a started sync producer (the seed API's), under its own group."""
    target = f"broker_lite at {producer.config.server}"

    def end(ends: Sequence[TxEnd]) -> list[EndOutcome]:
        try:
            answers = producer.end_transactions(transaction_ends(ends))
        except BrokerError as exc:  # one request for them all: each is refused with it
            answers = [exc] * len(ends)
        return end_outcomes(ends, answers, target)

    return end


class ProducerSeam:
    """``half_first``'s seam over the seed API's started sync
    :class:`~broker_lite.client.TransactionProducer` (whose listener answers check-backs).

    :meth:`send_half` stores one half and answers the seam's
    :class:`~outbox.targets.base.HalfStored` with the client's ``SendResult``
    (what ``HalfFirstResult.half`` reports); a half the broker did not store
    raises the broker's error. :meth:`end_transactions` is :func:`producer_ender`.
    """

    def __init__(self, producer: TransactionProducer) -> None:
        self.producer = producer
        self.group = producer.group
        self.description = f"broker_lite at {producer.config.server}"
        self.end_transactions = producer_ender(producer)

    def send_half(self, message: Message, *, tx_id: str) -> tuple[HalfStored, SendResult]:
        result = self.producer.send_half(message.replace(msg_id=tx_id))
        return stored_half(tx_id, message.topic, result), result
