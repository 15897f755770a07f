"""Answering the broker's check-backs for one transactional producer.

The broker sends ``CHECK_TRANSACTION_STATE`` on the producer's connection.
A listener with plain methods answers on a bounded pool
(``check_threads=(min, max)`` threads, ``check_queue_size`` waiting; past that
the broker is answered ``SYSTEM_BUSY`` and checks again later); one with
coroutine methods is awaited on the loop, at most ``check_threads[1]`` at
once with the same queue bound. An exception counts as ``UNKNOW``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging

from broker_lite.client.message import ReceivedMessage
from broker_lite.client.thread_pool import BoundedThreadPool, check_bounds
from broker_lite.client.transaction_types import (
    AsyncTransactionListener,
    LocalTransactionState,
    TransactionListener,
)
from broker_lite.errors import BrokerBusyError, ProtocolError, ResponseCode
from broker_lite.protocol import BodyError, decode
from broker_lite.protocol import messages as m

__all__ = ["Checkbacks", "awaitable", "is_async"]

log = logging.getLogger("broker_lite.client.transaction")


def is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn)


async def awaitable(value: object) -> object:
    """Await ``value`` if it is awaitable (an async listener's answer), else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


class Checkbacks:
    """The check-back side of producer group ``group``: its listener, pool and counts."""

    def __init__(self, group: str, listener: TransactionListener | AsyncTransactionListener,
                 check_threads: tuple[int, int], check_queue_size: int) -> None:
        min_threads, max_threads = check_threads
        check_bounds(min_threads, max_threads, check_queue_size, threads="check_threads",
                     queue="check_queue_size")
        self.group = group
        self.listener = listener
        self.check_threads = (min_threads, max_threads)
        self.check_queue_size = check_queue_size
        self.pool: BoundedThreadPool | None = None
        self._async_checks: asyncio.Semaphore | None = None
        self._checks_waiting = 0
        #: how many check-backs were answered, and with what
        self.answered: dict[LocalTransactionState, int] = {}

    def start(self) -> None:
        """Make the pool (plain listener) or the slots (async listener)."""
        if is_async(self.listener.check_local_transaction):
            self._async_checks = asyncio.Semaphore(self.check_threads[1])
        elif self.pool is None:
            self.pool = BoundedThreadPool(
                min_threads=self.check_threads[0], max_threads=self.check_threads[1],
                queue_size=self.check_queue_size, name=f"tx-check-{self.group}")

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False)

    def join(self, timeout: float) -> None:
        """Stop the pool and wait for its threads (the sync producer's shutdown)."""
        if self.pool is not None:
            self.pool.shutdown(wait=False)
            self.pool.join(timeout=timeout)

    async def answer(self, body: bytes) -> m.CheckTransactionResponse:
        """The request handler: decode the check, ask the listener, answer the state."""
        try:
            request = decode(body, m.CheckTransactionRequest)
        except BodyError as exc:
            raise ProtocolError(str(exc), code=ResponseCode.MALFORMED_REQUEST) from exc
        if request.producer_group != self.group:
            log.warning("check-back for group %r reached producer group %r",
                        request.producer_group, self.group)
        msg = ReceivedMessage.from_wire(request.message, transaction_id=request.transaction_id,
                                        check_times=request.check_times)
        if is_async(self.listener.check_local_transaction):
            state = await self._check_on_loop(msg)
        else:
            if self.pool is None:
                raise BrokerBusyError("the producer is not started")
            future = self.pool.submit(self._check_sync, msg)  # PoolFullError: SYSTEM_BUSY
            state = await asyncio.wrap_future(future)
        self.answered[state] = self.answered.get(state, 0) + 1
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
                    answer = await awaitable(self.listener.check_local_transaction(msg))
                except Exception:
                    log.exception("check_local_transaction failed for transaction %s: UNKNOW",
                                  msg.transaction_id)
                    answer = None
        finally:
            self._checks_waiting = max(0, self._checks_waiting)
        return LocalTransactionState.coerce(answer, what="check_local_transaction")
