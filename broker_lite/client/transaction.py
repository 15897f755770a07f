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

Check-back: :mod:`broker_lite.client.checkback` answers the broker's
``CHECK_TRANSACTION_STATE`` with ``listener.check_local_transaction(msg)``.
The states, listeners and results are in
:mod:`broker_lite.client.transaction_types`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Unpack

from broker_lite.client.checkback import Checkbacks, awaitable, is_async
from broker_lite.client.config import ConnectionOptions
from broker_lite.client.message import Message, SendResult
from broker_lite.client.producer import AsyncProducer, Producer
from broker_lite.client.thread_pool import BoundedThreadPool
from broker_lite.client.transaction_types import (
    AsyncTransactionListener,
    LocalTransactionState,
    TransactionEnd,
    TransactionListener,
    TransactionSendResult,
)
from broker_lite.errors import BrokerError
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from broker_lite.values.properties import TRANSACTION_ID, UNIQ_KEY

__all__ = ["AsyncTransactionProducer", "TransactionProducer"]

log = logging.getLogger("broker_lite.client.transaction")


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
        **options: Unpack[ConnectionOptions],
    ) -> None:
        super().__init__(group, server, **options)
        self.listener = listener
        self.checkbacks = Checkbacks(self.group, listener, check_threads, check_queue_size)
        self.session.set_handler(RequestCode.CHECK_TRANSACTION_STATE, self.checkbacks.answer)

    @property
    def check_threads(self) -> tuple[int, int]:
        return self.checkbacks.check_threads

    @property
    def check_queue_size(self) -> int:
        return self.checkbacks.check_queue_size

    @property
    def pool(self) -> BoundedThreadPool | None:
        """The check-back pool (a plain listener's), once started."""
        return self.checkbacks.pool

    @property
    def checks_answered(self) -> dict[LocalTransactionState, int]:
        """How many check-backs this producer answered, and with what."""
        return self.checkbacks.answered

    async def start(self) -> None:
        self.checkbacks.start()
        try:
            await super().start()
        except BaseException:
            self.checkbacks.stop()
            raise

    async def shutdown(self) -> None:
        try:
            await super().shutdown()
        finally:
            self.checkbacks.stop()

    # -- the transaction -------------------------------------------------------

    async def send_message_in_transaction(self, message: Message,
                                          arg: Any = None) -> TransactionSendResult:
        half, msg = await self.prepare(message)
        fn = self.listener.execute_local_transaction
        try:
            if is_async(fn):
                answer = await awaitable(fn(msg, arg))
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
        """End many transactions in one request; one response or error per item, in order.

        :meth:`AsyncProducer.end_transactions` is the same with public results.
        """
        return await self._end_batch(ends, self.group, None)


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
        **options: Unpack[ConnectionOptions],
    ) -> None:
        if is_async(listener.execute_local_transaction):
            raise TypeError("TransactionProducer needs a listener with plain methods; "
                            "use AsyncTransactionProducer for coroutines")
        self._tx = AsyncTransactionProducer(group, listener, server, check_threads=check_threads,
                                            check_queue_size=check_queue_size, **options)
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
        self._tx.checkbacks.join(timeout=5.0)

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
