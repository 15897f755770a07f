"""The values of a transaction: the local state, the listeners, and what ending one gives.

Shared by the transactional producers (:mod:`broker_lite.client.transaction`)
and the batched ends any producer sends (``AsyncProducer.end_transactions``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

import msgspec

from broker_lite.client.message import Message, ReceivedMessage, SendStatus
from broker_lite.errors import BrokerError
from broker_lite.protocol import messages as m

__all__ = [
    "AsyncTransactionListener",
    "LocalTransactionState",
    "TransactionEnd",
    "TransactionEndResult",
    "TransactionListener",
    "TransactionSendResult",
]

log = logging.getLogger("broker_lite.client.transaction")


class LocalTransactionState(Enum):
    """What the local transaction did. ``UNKNOWN`` is an alias of RocketMQ's ``UNKNOW``."""

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    UNKNOWN = "UNKNOW"

    @property
    def tx_state(self) -> m.TxState:
        """The end-transaction value on the wire."""
        return _TO_WIRE[self]

    @classmethod
    def coerce(cls, value: object, *, what: str) -> LocalTransactionState:
        """A listener's answer as a state; anything unexpected is UNKNOW (and logged)."""
        if isinstance(value, LocalTransactionState):
            return value
        if isinstance(value, m.TxState):
            return _FROM_WIRE[value]
        if value is not None:
            log.warning("%s returned %r, not a LocalTransactionState: counted as UNKNOW",
                        what, value)
        return cls.UNKNOW


_TO_WIRE = {
    LocalTransactionState.COMMIT_MESSAGE: m.TxState.COMMIT,
    LocalTransactionState.ROLLBACK_MESSAGE: m.TxState.ROLLBACK,
    LocalTransactionState.UNKNOW: m.TxState.UNKNOWN,
}
_FROM_WIRE = {wire: state for state, wire in _TO_WIRE.items()}


@runtime_checkable
class TransactionListener(Protocol):
    """Runs the local transaction and answers the broker's check-backs."""

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState: ...

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState: ...


@runtime_checkable
class AsyncTransactionListener(Protocol):
    """The same, as coroutines (for :class:`AsyncTransactionProducer`)."""

    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        ...

    async def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState: ...


@dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """The half's send result, the local state, and how ending the transaction went.

    ``queue_offset``/``commit_log_offset`` are the half's. ``end_outcome`` is
    the broker's answer to end-transaction (``"committed"``,
    ``"rolled_back"``, ``"unknown"``), or ``None`` when that request failed:
    ``end_error`` says why, and the check-back will resolve the half.
    """

    send_status: SendStatus
    msg_id: str
    transaction_id: str
    local_state: LocalTransactionState
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    end_outcome: str | None = None
    end_error: BrokerError | None = None
    #: where the committed message landed (when ``end_outcome == "committed"``)
    committed_queue_id: int | None = None
    committed_queue_offset: int | None = None
    #: the broker already had a half with this id (a re-sent transaction)
    duplicate: bool = False


class TransactionEnd(msgspec.Struct, frozen=True):
    """How to end one transaction; the offsets, when given, are checked against the half."""

    transaction_id: str
    state: LocalTransactionState
    commit_log_offset: int = -1
    queue_offset: int = -1
    msg_id: str = ""

    def to_wire(self, group: str) -> m.EndTransactionRequest:
        return m.EndTransactionRequest(
            producer_group=group, transaction_id=self.transaction_id, state=self.state.tx_state,
            commit_log_offset=self.commit_log_offset, queue_offset=self.queue_offset,
            msg_id=self.msg_id)


class TransactionEndResult(msgspec.Struct, frozen=True):
    """The broker's answer to ending one transaction.

    ``outcome`` is ``"committed"``, ``"rolled_back"`` or ``"unknown"`` (left
    for check-back); ``already`` is true when it had been ended the same way
    before. ``commit_log_offset``/``queue_id``/``queue_offset`` say where the
    committed message landed (``-1`` otherwise).
    """

    transaction_id: str
    outcome: str
    already: bool = False
    commit_log_offset: int = -1
    queue_id: int = -1
    queue_offset: int = -1

    @classmethod
    def from_wire(cls, transaction_id: str, wire: m.EndTransactionResponse
                  ) -> TransactionEndResult:
        return cls(transaction_id, wire.outcome, wire.already, wire.commit_log_offset,
                   wire.queue_id, wire.queue_offset)
