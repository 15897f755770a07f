"""broker_lite's native door as a :class:`~outbox.targets.base.Target`.

Halves for many rows go in one request (``AsyncProducer.send_halves``), and
the ends of many rows in one request (``AsyncProducer.end_transactions``);
each item succeeds or fails on its own. broker_lite makes both idempotent per
transaction id (the row's ``tx_id``), so a relay that sends the same row twice
never makes a second message.

A request the broker refuses as a whole (an ACL refusal for one row's topic,
a frame over the size limit) says nothing about which row is at fault, so
the target splits it in two and sends each half again, until every row has
an outcome of its own: the rows that can go go, and only the row at fault
gets the error (and counts an attempt). A request that did not get through
at all (the broker unreachable) is not split: no row is at fault, and
:class:`~outbox.errors.BrokerUnreachableError` is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from broker_lite.client import (
    AsyncProducer,
    ClientConfig,
    LocalTransactionState,
    Message,
    Producer,
    SendResult,
    TransactionEnd,
    TransactionEndResult,
    TransactionProducer,
)
from broker_lite.errors import (
    BrokerError,
    InvalidMessageError,
    NoPermissionError,
    TopicNotFoundError,
    UnauthorizedError,
    UnavailableError,
)
from outbox.config import Outbox
from outbox.ending import Ender
from outbox.errors import BrokerUnreachableError, RowFault, RowRefusedError
from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfStored,
    LeftToCheckback,
    OutgoingMessage,
    TxEnd,
    TxEnded,
    TxState,
)
from outbox.targets.runner import TargetPublisher

__all__ = [
    "LOCAL_STATES",
    "RECONNECT_MAX_DELAY",
    "RECONNECT_WAIT",
    "STATE_NAMES",
    "BrokerLitePublisher",
    "BrokerLiteTarget",
    "ProducerSeam",
    "broker_client_config",
    "end_outcomes",
    "producer_ender",
    "refused",
    "row_fault",
    "transaction_ends",
]

log = logging.getLogger("rocketbox.relay")
ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")

#: the relay's (and the responder's) broker clients try to reconnect at least this often
#: (seconds) while the broker is down: they are back at most this long after it answers
RECONNECT_MAX_DELAY = 0.5
#: a request made while the connection is down waits this long (seconds) for the
#: reconnect in progress, then fails (at most ``broker_timeout``): a relay pass during an
#: outage ends at once instead of holding its rows and its worker thread
RECONNECT_WAIT = 1.0

#: a row's end state as broker_lite's client names it, and back: the one mapping
LOCAL_STATES: dict[TxState, LocalTransactionState] = {
    "COMMIT": LocalTransactionState.COMMIT_MESSAGE,
    "ROLLBACK": LocalTransactionState.ROLLBACK_MESSAGE,
    "UNKNOWN": LocalTransactionState.UNKNOW}
STATE_NAMES: dict[LocalTransactionState, TxState] = {v: k for k, v in LOCAL_STATES.items()}
#: broker errors that say the setup is wrong, not the row, and not for now
_CONFIG_ERRORS = (TopicNotFoundError, NoPermissionError, UnauthorizedError)


def broker_client_config(outbox: Outbox) -> ClientConfig:
    """The broker_lite client settings of the relay and the check-back responder."""
    timeout = outbox.relay.broker_timeout
    return ClientConfig(server=outbox.broker, access_key=outbox.access_key,
                        secret_key=outbox.secret_key, request_timeout=timeout,
                        connect_timeout=min(3.0, timeout),
                        reconnect_max_delay=RECONNECT_MAX_DELAY)


def row_fault(error: BrokerError) -> RowFault:
    """What a broker_lite refusal of one row says: transient, the setup, or the row."""
    if error.retriable:
        return RowFault.TRANSIENT
    return RowFault.CONFIG if isinstance(error, _CONFIG_ERRORS) else RowFault.ROW_INVALID


class BrokerLiteTarget:
    """broker_lite through its native client: one connection, one request per batch.

    It connects under its own producer group (``<group>-relay``), so the
    broker never routes check-backs to it; the halves and their ends carry the
    outbox's producer group, whose check-backs ``rocketbox checker`` answers.

    A lost connection is retried in the background at least every
    :data:`RECONNECT_MAX_DELAY` seconds. A request takes at most
    ``broker_timeout``; made while the connection is down, it waits at most
    :data:`RECONNECT_WAIT` for it and then fails as a whole
    (:class:`~outbox.errors.BrokerUnreachableError`).
    """

    def __init__(self, outbox: Outbox, *, client_id: str | None = None) -> None:
        self.description = f"broker_lite at {outbox.broker}"
        self._group = outbox.producer_group
        self._timeout = outbox.relay.broker_timeout
        self._producer = AsyncProducer(outbox.producer_group + "-relay",
                                       config=broker_client_config(outbox), client_id=client_id)

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._producer.on_connect(callback)

    async def start(self) -> None:
        try:
            await self._producer.start()
        except BrokerError as exc:
            raise BrokerUnreachableError(f"broker unreachable: {exc}") from exc

    async def close(self) -> None:
        await self._producer.shutdown()

    def _request_timeout(self) -> float:
        if self._producer.connected:
            return self._timeout
        return min(self._timeout, RECONNECT_WAIT)

    async def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        halves: list[Message | BrokerError] = [_message(msg) for msg in messages]
        sendable = [half for half in halves if isinstance(half, Message)]
        sent = iter(await _one_outcome_each(sendable, self._send_halves))
        outcomes: list[HalfOutcome] = []
        for msg, half in zip(messages, halves, strict=True):
            result = next(sent) if isinstance(half, Message) else half
            outcomes.append(_stored(msg, result) if isinstance(result, SendResult)
                            else self._refused(msg.tx_id, result))
        return outcomes

    async def _send_halves(self, halves: list[Message]) -> list[SendResult | BrokerError]:
        """One request; raises :class:`BrokerError` when the broker refuses it whole."""
        return await _through(self._producer.send_halves(
            halves, group=self._group, timeout=self._request_timeout()))

    async def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        answers = await _one_outcome_each(list(ends), self._end)
        return end_outcomes(ends, answers, self.description)

    async def _end(self, ends: list[TxEnd]) -> list[TransactionEndResult | BrokerError]:
        """One request; raises :class:`BrokerError` when the broker refuses it whole."""
        return await _through(self._producer.end_transactions(
            transaction_ends(ends), group=self._group, timeout=self._request_timeout()))

    def _refused(self, tx_id: str, error: BrokerError) -> RowRefusedError:
        return refused(tx_id, error, self.description)


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
        return _stored_half(tx_id, message.topic, result), result


def _stored_half(tx_id: str, topic: str, result: SendResult) -> HalfStored:
    return HalfStored(tx_id, topic, result.commit_log_offset, result.queue_offset,
                      result.msg_id, result.transaction_id or "")


def _message(msg: OutgoingMessage) -> Message | BrokerError:
    """The half to send for ``msg``, or why the broker could not take it."""
    try:
        return Message(msg.topic, msg.body, msg.tag, msg.keys, msg.properties,
                       message_group=msg.message_group, msg_id=msg.tx_id)
    except ValueError as exc:
        return InvalidMessageError(str(exc), field="message")


def _stored(msg: OutgoingMessage, result: SendResult) -> HalfStored:
    return _stored_half(msg.tx_id, msg.topic, result)


async def _through(request: Awaitable[ResultT]) -> ResultT:
    """``await request``; one that did not get through at all is no row's fault."""
    try:
        return await request
    except (UnavailableError, TimeoutError) as exc:
        raise BrokerUnreachableError(f"broker unreachable: {exc}") from exc


async def _one_outcome_each(
        items: list[ItemT],
        send: Callable[[list[ItemT]], Awaitable[list[ResultT | BrokerError]]]
) -> list[ResultT | BrokerError]:
    """``send(items)``, split in halves while the broker refuses a request whole.

    Each row ends with its own outcome: a refusal that stays with a single row
    is that row's error. With one bad row in ``n``, this costs about
    ``2 * log2(n)`` extra requests, and only when something is wrong.
    """
    if not items:
        return []
    try:
        return await send(items)
    except BrokerError as exc:
        if len(items) == 1:
            return [exc]
        log.info("the broker refused a request of %d rows whole (%s); splitting it",
                 len(items), exc)
    middle = len(items) // 2
    return (await _one_outcome_each(items[:middle], send)
            + await _one_outcome_each(items[middle:], send))


class BrokerLitePublisher(TargetPublisher):
    """The sync publisher of :class:`BrokerLiteTarget` (what the relay is given)."""

    def __init__(self, outbox: Outbox, *, client_id: str | None = None) -> None:
        super().__init__(BrokerLiteTarget(outbox, client_id=client_id))
