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

What an end and its answer mean (the state mapping, the client's ends, the
seam's outcomes, a refusal as the row's error, the seed API's
:class:`ProducerSeam`) is :mod:`outbox.targets.broker_lite_ends`, which the
check-back responder and ``half_first`` share; its names are re-exported here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from broker_lite.client import (
    AsyncProducer,
    ClientConfig,
    Message,
    SendResult,
    TransactionEnd,
    TransactionEndResult,
)
from broker_lite.errors import BrokerError, InvalidMessageError, UnavailableError
from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError, RowRefusedError
from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfStored,
    HalfThenEnd,
    OutgoingMessage,
    RelayTuning,
    TxEnd,
    TxState,
)
from outbox.targets.broker_lite_ends import (
    LOCAL_STATES,
    STATE_NAMES,
    ProducerSeam,
    end_outcomes,
    producer_ender,
    refused,
    row_fault,
    stored_half,
    transaction_ends,
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



def broker_client_config(outbox: Outbox) -> ClientConfig:
    """The broker_lite client settings of the relay and the check-back responder."""
    timeout = outbox.relay.broker_timeout
    return ClientConfig(server=outbox.broker, access_key=outbox.access_key,
                        secret_key=outbox.secret_key, request_timeout=timeout,
                        connect_timeout=min(3.0, timeout),
                        reconnect_max_delay=RECONNECT_MAX_DELAY)


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

    #: the relay's defaults for this target, where the user set none (docs/outbox.md,
    #: "Lanes and batch size per target"): the relay is CPU-bound here, and bigger
    #: passes in fewer lanes cost less per row (1.20x the library's 200 and 3 in
    #: interleaved runs on the 2-core benchmark machine)
    relay_tuning = RelayTuning(batch_size=500, drain_lanes=2)
    #: broker_lite keeps one half and one commit per ``tx_id`` (a second is answered as the
    #: first): the leading listener may relay the rows a wake-up names without claiming
    #: them (outbox.notified; docs/outbox.md, "The notified rows, read without a claim")
    halves_deduplicated = True

    def __init__(self, outbox: Outbox, *, client_id: str | None = None) -> None:
        self.description = f"broker_lite at {outbox.broker_display}"
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

    async def send_and_end(self, messages: Sequence[OutgoingMessage],
                           states: Sequence[TxState]) -> list[HalfThenEnd] | None:
        """The halves (``SEND_BATCH``) and their ends (``END_TRANSACTION_BATCH``, each half
        named by ``tx_id``) written back to back on the connection, then both answers
        awaited: one round trip (:class:`~outbox.targets.base.PipelinedTarget`).

        broker_lite serves a connection's sends and ends in the order it reads
        them, so each half is stored before its end is served. Whatever the
        order, nothing is lost: an end that found no half (or any end refused
        for a stored half) is sent again the two-step way, naming the half by
        its offsets; ends are idempotent per ``tx_id``. None (take the two-step
        way) while disconnected, for a message the client refuses to build, or
        when the broker refuses the halves' request whole: there the two-step
        way splits it and names the row at fault.
        """
        halves: list[Message | BrokerError] = [_message(msg) for msg in messages]
        sendable = [half for half in halves if isinstance(half, Message)]
        if len(sendable) != len(halves) or not self._producer.connected:
            return None
        timeout = self._request_timeout()
        ends = [TransactionEnd(msg.tx_id, LOCAL_STATES[state], msg_id=msg.tx_id)
                for msg, state in zip(messages, states, strict=True)]
        # tasks start in the order made, and each writes its frame before its first wait
        sent_task = asyncio.ensure_future(self._producer.send_halves(
            sendable, group=self._group, timeout=timeout))
        ended_task = asyncio.ensure_future(self._producer.end_transactions(
            ends, group=self._group, timeout=timeout))
        sent, answered = await asyncio.gather(sent_task, ended_task, return_exceptions=True)
        if isinstance(sent, BaseException):
            if isinstance(sent, (UnavailableError, TimeoutError)):
                raise BrokerUnreachableError(f"broker unreachable: {sent}") from sent
            if isinstance(sent, BrokerError):
                return None  # refused whole: the two-step way splits it (ends are idempotent)
            raise sent
        stored: list[HalfOutcome] = [
            _stored(msg, result) if isinstance(result, SendResult)
            else self._refused(msg.tx_id, result)
            for msg, result in zip(messages, sent, strict=True)]
        answers: list[TransactionEndResult | BrokerError | None] = \
            list(answered) if not isinstance(answered, BaseException) else [None] * len(ends)
        done: list[tuple[int, TxEnd, TransactionEndResult]] = []
        again: list[tuple[int, TxEnd]] = []
        for i, (half, state, answer) in enumerate(zip(stored, states, answers, strict=True)):
            if not isinstance(half, HalfStored):
                continue  # no end counts for a refused half
            end = TxEnd(half, state)
            if answer is None or isinstance(answer, BrokerError):
                again.append((i, end))
            else:
                done.append((i, end, answer))
        outcomes: dict[int, EndOutcome] = dict(zip(
            (i for i, _, _ in done),
            end_outcomes([end for _, end, _ in done], [answer for _, _, answer in done],
                         self.description), strict=True))
        if again:
            redone = await self.end_transactions([end for _, end in again])
            outcomes.update((i, outcome) for (i, _), outcome in zip(again, redone, strict=True))
        return [(half, outcomes.get(i)) for i, half in enumerate(stored)]

    def _refused(self, tx_id: str, error: BrokerError) -> RowRefusedError:
        return refused(tx_id, error, self.description)


def _message(msg: OutgoingMessage) -> Message | BrokerError:
    """The half to send for ``msg``, or why the broker could not take it."""
    try:
        return Message(msg.topic, msg.body, msg.tag, msg.keys, msg.properties,
                       message_group=msg.message_group, msg_id=msg.tx_id)
    except ValueError as exc:
        return InvalidMessageError(str(exc), field="message")


def _stored(msg: OutgoingMessage, result: SendResult) -> HalfStored:
    return stored_half(msg.tx_id, msg.topic, result)


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
