"""Producers: :class:`AsyncProducer` (asyncio) and :class:`Producer` (sync facade).

The broker picks the queue (``queue_id=-1``, round robin) unless a message
has a ``sharding_key``, which the broker hashes to a queue so that messages
with the same key keep their order.

Send semantics:

- ``send`` waits for the broker's answer; any refusal raises the broker's
  error (see :mod:`broker_lite.errors`); a broken connection raises
  :class:`BrokerUnavailableError`, retriable. Sends are not retried
  automatically: a plain message sent again after a lost answer may be
  stored twice.
- ``send_oneway`` writes the request and returns; the broker never answers.
- ``send_batch`` sends many messages in one request. Every message is
  stored or refused on its own: when all are stored it returns their
  results in order; otherwise it raises :class:`BatchSendError`, whose
  ``outcomes`` holds each message's :class:`SendResult` or error, so the
  caller knows exactly which ones to send again.

For a relay that ends transactions it did not start (an outbox):
``send_halves`` sends many messages as transaction halves in one request,
and ``end_transactions`` ends many transactions in one request. Each item
gets its own outcome, a result or the broker's error; a request the broker
refuses whole raises the broker's error, and one that does not get through
raises :class:`BrokerUnavailableError` or :class:`TimeoutError`.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterable, Sequence
from typing import Unpack

from broker_lite.client.config import ClientConfig, ConnectionOptions, build_config, check_group
from broker_lite.client.errors import BatchSendError
from broker_lite.client.message import Message, SendResult
from broker_lite.client.session import Session, SessionClient
from broker_lite.client.sync_client import GroupSyncClient
from broker_lite.client.transaction_types import TransactionEnd, TransactionEndResult
from broker_lite.errors import BrokerError, ResponseCode, error_for_code
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m

__all__ = ["AsyncProducer", "Producer"]


class AsyncProducer(SessionClient):
    """Sends messages for producer group ``group``; all methods are coroutines.

    Use as ``async with AsyncProducer(...) as producer:`` or call
    :meth:`start` / :meth:`shutdown`. ``timeout`` is the per-request deadline
    in seconds. Many sends may be in flight at once on the one connection.
    """

    def __init__(self, group: str, server: str | None = None,
                 **options: Unpack[ConnectionOptions]) -> None:
        self.group = check_group(group)
        self.config = build_config(server, **options)
        self.session = Session(self.config)
        self.session.add_producer_group(self.group)


    async def send(self, message: Message, *, timeout: float | None = None) -> SendResult:
        return await self.send_wire(message.to_wire(), timeout=timeout)

    async def send_wire(self, wire: m.WireMessage, *, timeout: float | None = None) -> SendResult:
        """Send an already-built wire message (halves use this)."""
        result = await self.session.request(
            RequestCode.SEND_MESSAGE, m.SendRequest(producer_group=self.group, message=wire),
            m.SendResult, timeout=timeout)
        return SendResult.from_wire(result)

    async def send_oneway(self, message: Message) -> None:
        await self.session.oneway(
            RequestCode.SEND_MESSAGE,
            m.SendRequest(producer_group=self.group, message=message.to_wire()))

    async def send_batch(self, messages: Iterable[Message], *,
                         timeout: float | None = None) -> list[SendResult]:
        """Send all ``messages`` in one request; see the module docstring for errors."""
        born = int(time.time() * 1000)
        wires = [msg.to_wire(born_timestamp=born) for msg in messages]
        if not wires:
            return []
        outcomes = await self._send_wires(wires, self.group, timeout)
        results = [o for o in outcomes if isinstance(o, SendResult)]
        if len(results) != len(outcomes):
            raise BatchSendError(outcomes)
        return results

    async def send_halves(self, messages: Sequence[Message], *, group: str | None = None,
                          timeout: float | None = None) -> list[SendResult | BrokerError]:
        """Send ``messages`` as transaction halves in one request; one outcome each, in order.

        ``group`` is the producer group the halves belong to, whose
        check-backs resolve them (default: this producer's). A message's
        ``msg_id`` is its transaction id: a half sent again with the same id
        is recognised (``SendResult.duplicate``). Raises the broker's error
        when it refuses the request whole (the caller may split it).
        """
        if not messages:
            return []
        born = int(time.time() * 1000)
        wires = [msg.to_wire(transactional=True, born_timestamp=born) for msg in messages]
        return await self._send_wires(wires, group or self.group, timeout)

    async def _send_wires(self, wires: list[m.WireMessage], group: str,
                          timeout: float | None) -> list[SendResult | BrokerError]:
        response = await self.session.request(
            RequestCode.SEND_BATCH, m.SendBatchRequest(producer_group=group, messages=wires),
            m.SendBatchResponse, timeout=timeout)
        if len(response.results) != len(wires):
            raise BrokerError(f"broker answered {len(response.results)} results for a batch "
                              f"of {len(wires)}")
        outcomes: list[SendResult | BrokerError] = []
        for item in response.results:
            if item.code == ResponseCode.SUCCESS and item.result is not None:
                outcomes.append(SendResult.from_wire(item.result))
            else:
                error = item.error or m.ErrorBody(message=f"refused with code {item.code}")
                outcomes.append(error_for_code(item.code, error.message,
                                               retriable=error.retriable))
        return outcomes

    async def end_transactions(self, ends: Sequence[TransactionEnd], *,
                               group: str | None = None, timeout: float | None = None
                               ) -> list[TransactionEndResult | BrokerError]:
        """End many transactions in one request; one outcome each, in order.

        ``group`` as for :meth:`send_halves`. Ending a transaction the same
        way twice answers ``already=True``; the other way, the broker's
        ``TransactionConflictError``. Raises the broker's error when it
        refuses the request whole.
        """
        answers = await self._end_batch(ends, group or self.group, timeout)
        return [answer if isinstance(answer, BrokerError)
                else TransactionEndResult.from_wire(end.transaction_id, answer)
                for end, answer in zip(ends, answers, strict=True)]

    async def _end_batch(self, ends: Sequence[TransactionEnd], group: str,
                         timeout: float | None) -> list[m.EndTransactionResponse | BrokerError]:
        if not ends:
            return []
        response = await self.session.request(
            RequestCode.END_TRANSACTION_BATCH,
            m.EndTransactionBatchRequest(items=[e.to_wire(group) for e in ends]),
            m.EndTransactionBatchResponse, timeout=timeout)
        out: list[m.EndTransactionResponse | BrokerError] = []
        for code, result, error in zip(response.codes, response.results, response.errors,
                                       strict=True):
            if code == ResponseCode.SUCCESS and result is not None:
                out.append(result)
            else:
                body = error or m.ErrorBody(message=f"refused with code {code}")
                out.append(error_for_code(code, body.message, retriable=body.retriable))
        return out


class Producer(GroupSyncClient[AsyncProducer]):
    """The sync producer: an :class:`AsyncProducer` on a background event loop.

    ``with Producer("group", "127.0.0.1:10911") as producer: producer.send(msg)``.
    All methods are thread-safe.
    """

    def __init__(self, group: str, server: str | None = None,
                 **options: Unpack[ConnectionOptions]) -> None:
        self._attach(AsyncProducer(group, server, **options))

    _kind = "producer"
    _loop_prefix = "broker-lite-producer"

    def _attach(self, producer: AsyncProducer) -> None:
        self._async = producer
        self._loop = None

    @property
    def config(self) -> ClientConfig:
        return self._async.config

    def send(self, message: Message, *, timeout: float | None = None) -> SendResult:
        return self._running().run(self._async.send(message, timeout=timeout))

    def send_async(self, message: Message, *,
                   timeout: float | None = None) -> concurrent.futures.Future[SendResult]:
        """Start a send; the future resolves to its SendResult (or the error)."""
        return self._running().submit(self._async.send(message, timeout=timeout))

    def send_oneway(self, message: Message) -> None:
        self._running().run(self._async.send_oneway(message))

    def send_batch(self, messages: Iterable[Message], *,
                   timeout: float | None = None) -> list[SendResult]:
        return self._running().run(self._async.send_batch(list(messages), timeout=timeout))

    def end_transactions(self, ends: Sequence[TransactionEnd], *, group: str | None = None,
                         timeout: float | None = None
                         ) -> list[TransactionEndResult | BrokerError]:
        """See :meth:`AsyncProducer.end_transactions`."""
        return self._running().run(self._async.end_transactions(list(ends), group=group,
                                                                timeout=timeout))
