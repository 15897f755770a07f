"""Transactional producers, the RocketMQ seed API.

``send_message_in_transaction(msg, arg)`` runs RocketMQ's steps
(ROCKETMQ_SEMANTICS.md, "Producer"):

1. Strip any delay and send the message as a half (prepared) message,
   synchronously. If that raises, the caller gets the error and the local
   transaction never runs.
2. Run ``listener.execute_local_transaction(msg, arg)``. ``None``, an
   exception, or anything that is not a state counts as ``UNKNOW``.
3. End the transaction: ``COMMIT`` (8), ``ROLLBACK`` (12) or ``UNKNOWN``
   (0), with the half's commit-log and queue offsets. RocketMQ sends this
   one-way; here it is a request, but its failure does not fail the call:
   it is logged and reported in :attr:`TransactionSendResult.end_error`,
   and the broker's check-back resolves the half.

Check-back: the broker sends ``CHECK_TRANSACTION_STATE`` on the producer's
connection. It runs ``listener.check_local_transaction(msg)`` on a bounded
pool (``check_threads=(min, max)`` threads, ``check_queue_size`` waiting;
past that the broker is answered ``SYSTEM_BUSY`` and checks again later) and
answers with the state (an exception counts as ``UNKNOW``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from broker_lite.client.config import ClientConfig
from broker_lite.client.message import Message, ReceivedMessage, SendResult, SendStatus
from broker_lite.client.producer import AsyncProducer, Producer
from broker_lite.client.thread_pool import BoundedThreadPool
from broker_lite.errors import (
    BrokerBusyError,
    BrokerError,
    ConfigurationError,
    ProtocolError,
    ResponseCode,
    error_for_code,
)
from broker_lite.protocol import BodyError, RequestCode, decode
from broker_lite.protocol import messages as m
from broker_lite.storage.properties import TRANSACTION_ID, UNIQ_KEY

__all__ = [
    "AsyncTransactionListener",
    "AsyncTransactionProducer",
    "LocalTransactionState",
    "TransactionEnd",
    "TransactionListener",
    "TransactionProducer",
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


@dataclass(frozen=True, slots=True)
class TransactionEnd:
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


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn)


async def _awaitable(value: object) -> object:
    """Await ``value`` if it is awaitable (an async listener's answer), else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


class AsyncTransactionProducer(AsyncProducer):
    """A transactional producer on asyncio.

    ``listener`` may have plain methods (``execute_local_transaction`` then
    runs in the loop's default executor, check-backs on the bounded pool) or
    coroutine methods (awaited on the loop; at most ``check_threads[1]``
    check-backs at once).
    """

    def __init__(
        self,
        group: str,
        listener: TransactionListener | AsyncTransactionListener,
        server: str | None = None,
        *,
        check_threads: tuple[int, int] = (1, 1),
        check_queue_size: int = 2000,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float | None = None,
        client_id: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        super().__init__(group, server, access_key=access_key, secret_key=secret_key,
                         timeout=timeout, client_id=client_id, config=config)
        min_threads, max_threads = check_threads
        if min_threads < 1 or max_threads < min_threads:
            raise ConfigurationError(f"check_threads must be (min, max) with 1 <= min <= max, "
                                     f"got {check_threads}", setting="check_threads")
        if check_queue_size < 1:
            raise ConfigurationError(f"check_queue_size must be >= 1, got {check_queue_size}",
                                     setting="check_queue_size")
        self.listener = listener
        self.check_threads = (min_threads, max_threads)
        self.check_queue_size = check_queue_size
        self.pool: BoundedThreadPool | None = None
        self._async_checks: asyncio.Semaphore | None = None
        self._checks_waiting = 0
        #: how many check-backs this producer answered, and with what
        self.checks_answered: dict[LocalTransactionState, int] = {}
        self.session.set_handler(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)

    async def start(self) -> None:
        if _is_async(self.listener.check_local_transaction):
            self._async_checks = asyncio.Semaphore(self.check_threads[1])
        elif self.pool is None:
            self.pool = BoundedThreadPool(
                min_threads=self.check_threads[0], max_threads=self.check_threads[1],
                queue_size=self.check_queue_size, name=f"tx-check-{self.group}")
        try:
            await super().start()
        except BaseException:
            self._stop_pool()
            raise

    async def shutdown(self) -> None:
        try:
            await super().shutdown()
        finally:
            self._stop_pool()

    def _stop_pool(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)

    # -- the transaction -------------------------------------------------------

    async def send_message_in_transaction(self, message: Message,
                                          arg: Any = None) -> TransactionSendResult:
        half, msg = await self.prepare(message)
        fn = self.listener.execute_local_transaction
        try:
            if _is_async(fn):
                answer = await _awaitable(fn(msg, arg))
            else:
                answer = await asyncio.get_running_loop().run_in_executor(None, fn, msg, arg)
        except Exception:
            log.exception("execute_local_transaction failed for transaction %s: UNKNOW",
                          half.transaction_id)
            answer = None
        state = LocalTransactionState.coerce(answer, what="execute_local_transaction")
        return await self.end_transaction(half, state)

    async def send_half(self, message: Message) -> SendResult:
        """Only step 1: send the half and return; end it later with :meth:`resolve_transaction`.

        With ``message.msg_id`` set (an outbox ``tx_id``), sending the same half
        again is recognised by the broker (``SendResult.duplicate``).
        """
        return (await self.prepare(message))[0]

    async def prepare(self, message: Message) -> tuple[SendResult, Message]:
        """Step 1: send the half; returns it and the message as the listener sees it."""
        half = await self.send_wire(message.to_wire(transactional=True))
        transaction_id = half.transaction_id or half.msg_id
        properties = dict(message.properties)
        properties[TRANSACTION_ID] = transaction_id
        properties[UNIQ_KEY] = half.msg_id
        return half, message._evolve(properties=properties, msg_id=half.msg_id)

    async def end_transaction(self, half: SendResult,
                              state: LocalTransactionState) -> TransactionSendResult:
        """Step 3: end the transaction; a failure is logged and reported, not raised."""
        transaction_id = half.transaction_id or half.msg_id
        request = m.EndTransactionRequest(
            producer_group=self.group, transaction_id=transaction_id, state=state.tx_state,
            commit_log_offset=half.commit_log_offset, queue_offset=half.queue_offset,
            msg_id=half.msg_id, from_check=False)
        response: m.EndTransactionResponse | None = None
        error: BrokerError | None = None
        try:
            response = await self.session.request(RequestCode.END_TRANSACTION, request,
                                                  m.EndTransactionResponse)
        except BrokerError as exc:
            error = exc
            log.warning("end-transaction %s (%s) failed, the broker's check-back will resolve "
                        "it: %s", transaction_id, state.value, exc)
        committed = response is not None and response.outcome == "committed"
        # positional, in field order (a frozen dataclass binds keywords slowly)
        return TransactionSendResult(
            half.send_status, half.msg_id, transaction_id, state, half.topic, half.queue_id,
            half.queue_offset, half.commit_log_offset,
            response.outcome if response is not None else None, error,
            response.queue_id if committed and response else None,
            response.queue_offset if committed and response else None, half.duplicate)

    # -- ending a transaction later (the outbox relay) ------------------------------

    async def resolve_transaction(self, end: TransactionEnd) -> m.EndTransactionResponse:
        """End a transaction by id, e.g. one whose half another process sent.

        Raises the broker's error (``TransactionNotFoundError``,
        ``TransactionConflictError`` when it was resolved the other way ...).
        Ending it the same way twice answers ``already=True``.
        """
        return await self.session.request(RequestCode.END_TRANSACTION,
                                          end.to_wire(self.group), m.EndTransactionResponse)

    async def resolve_transactions(
            self, ends: Sequence[TransactionEnd]) -> list[m.EndTransactionResponse | BrokerError]:
        """End many transactions in one request; one response or error per item, in order."""
        if not ends:
            return []
        response = await self.session.request(
            RequestCode.END_TRANSACTION_BATCH,
            m.EndTransactionBatchRequest(items=[e.to_wire(self.group) for e in ends]),
            m.EndTransactionBatchResponse)
        out: list[m.EndTransactionResponse | BrokerError] = []
        for code, result, error in zip(response.codes, response.results, response.errors,
                                       strict=True):
            if code == ResponseCode.SUCCESS and result is not None:
                out.append(result)
            else:
                body = error or m.ErrorBody(message=f"refused with code {code}")
                out.append(error_for_code(code, body.message, retriable=body.retriable))
        return out

    # -- check-back ------------------------------------------------------------

    async def _on_check(self, body: bytes) -> m.CheckTransactionResponse:
        try:
            request = decode(body, m.CheckTransactionRequest)
        except BodyError as exc:
            raise ProtocolError(str(exc), code=ResponseCode.MALFORMED_REQUEST) from exc
        if request.producer_group != self.group:
            log.warning("check-back for group %r reached producer group %r",
                        request.producer_group, self.group)
        msg = ReceivedMessage.from_wire(request.message, transaction_id=request.transaction_id,
                                        check_times=request.check_times)
        fn = self.listener.check_local_transaction
        if _is_async(fn):
            state = await self._check_on_loop(msg)
        else:
            if self.pool is None:
                raise BrokerBusyError("the producer is not started")
            future = self.pool.submit(self._check_sync, msg)  # PoolFullError: SYSTEM_BUSY
            state = await asyncio.wrap_future(future)
        self.checks_answered[state] = self.checks_answered.get(state, 0) + 1
        return m.CheckTransactionResponse(state=state.tx_state)

    def _check_sync(self, msg: ReceivedMessage) -> LocalTransactionState:
        try:
            answer = self.listener.check_local_transaction(msg)
        except Exception:
            log.exception("check_local_transaction failed for transaction %s: UNKNOW",
                          msg.transaction_id)
            answer = None
        return LocalTransactionState.coerce(answer, what="check_local_transaction")

    async def _check_on_loop(self, msg: ReceivedMessage) -> LocalTransactionState:
        slots = self._async_checks
        if slots is None:
            raise BrokerBusyError("the producer is not started")
        if slots.locked() and self._checks_waiting >= self.check_queue_size:
            raise BrokerBusyError(f"{self.check_queue_size} check-backs already wait")
        self._checks_waiting += 1
        try:
            async with slots:
                self._checks_waiting -= 1
                try:
                    answer = await _awaitable(self.listener.check_local_transaction(msg))
                except Exception:
                    log.exception("check_local_transaction failed for transaction %s: UNKNOW",
                                  msg.transaction_id)
                    answer = None
        finally:
            self._checks_waiting = max(0, self._checks_waiting)
        return LocalTransactionState.coerce(answer, what="check_local_transaction")


class TransactionProducer(Producer):
    """The sync transactional producer (the seed API).

    ``execute_local_transaction`` runs in the calling thread; check-backs run
    on the bounded pool. It is also a plain :class:`Producer` (``send`` ...).
    """

    def __init__(
        self,
        group: str,
        listener: TransactionListener,
        server: str | None = None,
        *,
        check_threads: tuple[int, int] = (1, 1),
        check_queue_size: int = 2000,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float | None = None,
        client_id: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        if _is_async(listener.execute_local_transaction):
            raise TypeError("TransactionProducer needs a listener with plain methods; "
                            "use AsyncTransactionProducer for coroutines")
        self._tx = AsyncTransactionProducer(
            group, listener, server, check_threads=check_threads,
            check_queue_size=check_queue_size, access_key=access_key, secret_key=secret_key,
            timeout=timeout, client_id=client_id, config=config)
        self._attach(self._tx)
        self.listener = listener

    @property
    def checks_answered(self) -> dict[LocalTransactionState, int]:
        return dict(self._tx.checks_answered)

    def start(self) -> None:
        try:
            super().start()
        except BaseException:
            self._join_pool()
            raise

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            self._join_pool()

    def _join_pool(self) -> None:
        pool = self._tx.pool
        if pool is not None:
            pool.shutdown(wait=False)
            pool.join(timeout=5.0)

    def resolve_transaction(self, end: TransactionEnd) -> m.EndTransactionResponse:
        """See :meth:`AsyncTransactionProducer.resolve_transaction`."""
        return self._running().run(self._tx.resolve_transaction(end))

    def resolve_transactions(
            self, ends: Sequence[TransactionEnd]) -> list[m.EndTransactionResponse | BrokerError]:
        return self._running().run(self._tx.resolve_transactions(list(ends)))

    def send_half(self, message: Message) -> SendResult:
        """Only step 1: send the half and return; end it later with :meth:`resolve_transaction`."""
        return self._running().run(self._tx.send_half(message))

    def send_message_in_transaction(self, message: Message,
                                    arg: Any = None) -> TransactionSendResult:
        loop = self._running()
        half, msg = loop.run(self._tx.prepare(message))
        try:
            answer = self.listener.execute_local_transaction(msg, arg)
        except Exception:
            log.exception("execute_local_transaction failed for transaction %s: UNKNOW",
                          half.transaction_id)
            answer = None
        state = LocalTransactionState.coerce(answer, what="execute_local_transaction")
        return loop.run(self._tx.end_transaction(half, state))
