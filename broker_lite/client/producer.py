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
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterable

from broker_lite.client.config import ClientConfig, build_config, check_group
from broker_lite.client.errors import BatchSendError
from broker_lite.client.message import Message, SendResult
from broker_lite.client.session import Session, SessionClient
from broker_lite.client.sync_client import SyncClient
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

    def __init__(
        self,
        group: str,
        server: str | None = None,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float | None = None,
        client_id: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self.group = check_group(group)
        self.config = build_config(server, access_key=access_key, secret_key=secret_key,
                                   timeout=timeout, client_id=client_id, config=config)
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
        wires = [msg.to_wire() for msg in messages]
        if not wires:
            return []
        response = await self.session.request(
            RequestCode.SEND_BATCH,
            m.SendBatchRequest(producer_group=self.group, messages=wires),
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
        results = [o for o in outcomes if isinstance(o, SendResult)]
        if len(results) != len(outcomes):
            raise BatchSendError(outcomes)
        return results


class Producer(SyncClient):
    """The sync producer: an :class:`AsyncProducer` on a background event loop.

    ``with Producer("group", "127.0.0.1:10911") as producer: producer.send(msg)``.
    All methods are thread-safe.
    """

    def __init__(
        self,
        group: str,
        server: str | None = None,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        timeout: float | None = None,
        client_id: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self._attach(AsyncProducer(group, server, access_key=access_key,
                                   secret_key=secret_key, timeout=timeout,
                                   client_id=client_id, config=config))

    _kind = "producer"
    _async: AsyncProducer

    def _attach(self, producer: AsyncProducer) -> None:
        self._async = producer
        self._loop = None

    def _loop_name(self) -> str:
        return f"broker-lite-producer-{self.group}"

    @property
    def group(self) -> str:
        return self._async.group

    @property
    def client_id(self) -> str:
        return self._async.client_id

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
