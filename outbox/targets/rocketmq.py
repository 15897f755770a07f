"""Apache RocketMQ 5 (its gRPC proxy) as a :class:`~outbox.targets.base.Target`.

It publishes through the official ``rocketmq-python-client`` (its public
``Producer``; no protos of ours). What the proxy does, and what this target
does about it (docs/rocketmq.md has the whole story):

* **One SendMessage per half, all in flight at once.** The proxy refuses
  transactional batches, so each half is its own call; the target makes them
  with the client's own asynchronous RPC (``rpc_client.send_message_async``,
  on the client's I/O loop), so every half of a pass is in flight together,
  up to ``in_flight`` calls, and no thread waits on one. The client's queue
  selector and route cache pick the queue, as ``Producer.send`` does, and the
  topic joins the producer's settings, so the proxy routes its check-backs
  here. No half is re-sent by the target: a call that fails is the row's
  error, and the relay's next pass sends a new half (``Producer.send``'s own
  retries re-send the same message id, which the proxy stores again). Each
  half carries the row's ``tx_id`` as a key
  and as the :data:`TX_ID_PROPERTY` property (what consumers de-duplicate on),
  and no message group (the client refuses a transactional message with one).
* **The half's ids are the row's.** The answer's ``message_id`` (the half's
  UNIQ_KEY, which the client makes on each send) and ``transaction_id`` come
  back in :class:`~outbox.targets.base.HalfStored`; the relay writes them on
  the row before it sends the end, and never sends a second half for a row
  that has them.
* **The end at once, to the proxy that took the half,** with the client's
  asynchronous ``end_transaction_async``, every end of a wave in flight
  together. The proxy keeps the
  transaction in that process's memory for about 30 s and forgets it on first
  use; an end it cannot match ("cannot found transaction data", an
  INTERNAL_SERVER_ERROR) becomes :class:`~outbox.targets.base.LeftToCheckback`:
  the check-back commits the recorded half from the status table. OK from
  EndTransaction only means the proxy handed a one-way request to the broker.
* **Errors.** Refused credentials, no permission and an unknown topic are
  ``config`` refusals of the row (the start-up probe, :func:`probe`, turns the
  first two into a :class:`~outbox.errors.ConfigurationError`); a proxy that
  does not answer is :class:`~outbox.errors.BrokerUnreachableError`.

The relay's producer answers check-backs too (the proxy may route one to any
producer of the topic), with the same per-half rules as ``rocketbox checker``
(:class:`~outbox.targets.rocketmq_checkback.StatusTableChecker`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import grpc
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import (
    Code,
    Encoding,
    EndTransactionRequest,
    MessageType,
    QueryRouteRequest,
    SendMessageRequest,
    TransactionSource,
)
from rocketmq.v5.client.balancer.queue_selector import QueueSelector
from rocketmq.v5.exception import (
    BadRequestException,
    ForbiddenException,
    NotFoundException,
    PayloadEmptyException,
    PayloadTooLargeException,
    UnauthorizedException,
)
from rocketmq.v5.util import MessageIdCodec, MessagingResultChecker, Misc

from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError, ConfigurationError, RowFault, RowRefusedError
from outbox.targets.base import (
    TX_ID_PROPERTY,
    EndOutcome,
    HalfOutcome,
    HalfStored,
    LeftToCheckback,
    OutgoingMessage,
    TxEnd,
    TxEnded,
)

__all__ = ["PROBE_TOPIC", "RESOLUTIONS", "TX_ID_PROPERTY", "RocketMQTarget", "client_configuration",
           "fault_of", "is_transaction_gone", "probe"]

log = logging.getLogger("rocketbox.relay")

#: a row's end state as RocketMQ names it (UNKNOWN has no resolution to send)
RESOLUTIONS = {"COMMIT": TransactionResolution.COMMIT,
                "ROLLBACK": TransactionResolution.ROLLBACK}
#: the topic the start-up probe asks a route for (that it exists does not matter)
PROBE_TOPIC = "rocketbox-probe"
#: the proxy's words when its transaction table has no entry for an end
_TRANSACTION_GONE = "transaction data"


def client_configuration(outbox: Outbox, endpoint: str | None = None) -> ClientConfiguration:
    """The official client's configuration for ``outbox`` (all its proxies, or one)."""
    address = outbox.target_address
    endpoints = endpoint or ";".join(address.endpoint_strings())
    return ClientConfiguration(endpoints, Credentials(outbox.access_key or "",
                                                      outbox.secret_key or ""),
                               # whole seconds: the client passes it where an int is needed
                               request_timeout=max(1, round(outbox.relay.broker_timeout)))


def fault_of(exc: BaseException) -> RowFault | None:
    """What a client error says: the setup, the row, or None (transient / unreachable)."""
    if isinstance(exc, UnauthorizedException | ForbiddenException | NotFoundException):
        return RowFault.CONFIG
    if isinstance(exc, PayloadTooLargeException | PayloadEmptyException | BadRequestException):
        return RowFault.ROW_INVALID
    return None


def _unreachable(exc: BaseException) -> bool:
    """The call did not get through (no answer, connection refused, deadline)."""
    return isinstance(exc, grpc.RpcError | TimeoutError | ConnectionError | OSError)


def is_transaction_gone(code: int, message: str) -> bool:
    """The proxy's "cannot found transaction data": it no longer holds this transaction."""
    return code == Code.INTERNAL_SERVER_ERROR and _TRANSACTION_GONE in message


def query_route(producer: Producer, topic: str) -> None:
    """Ask the proxy for ``topic``'s route; raise the client's typed error for its answer.

    The client's own route lookup logs the proxy's status and raises a plain
    ``Exception``, which cannot tell refused credentials or an unknown topic
    from an outage; this asks the same question and keeps the answer.
    """
    request = QueryRouteRequest()
    request.topic.name = topic
    request.topic.resource_namespace = producer.client_configuration.namespace
    request.endpoints.CopyFrom(producer.client_configuration.rpc_endpoints.endpoints)
    timeout = producer.client_configuration.request_timeout
    response = producer.rpc_client.query_topic_route_async(
        producer.client_configuration.rpc_endpoints, request, metadata=producer.sign(),
        timeout=timeout).result(timeout + 1)
    MessagingResultChecker.check(response.status)


def probe(outbox: Outbox) -> Exception | None:
    """Ask each proxy once for a route; raise for a setup that can never work.

    Refused credentials or a refused account raise
    :class:`~outbox.errors.ConfigurationError` naming the target; an unknown
    probe topic means the proxy answered and took the credentials (None); no
    answer is an outage, returned for the caller to report and retry.
    """
    for endpoint in outbox.target_address.endpoint_strings():
        producer = Producer(client_configuration(outbox, endpoint),
                            tls_enable=outbox.target_address.tls)
        try:
            producer.startup()
            query_route(producer, PROBE_TOPIC)
        except UnauthorizedException as exc:
            keys = ("--access-key/--secret-key" if outbox.access_key or outbox.secret_key
                    else "no --access-key/--secret-key given")
            raise ConfigurationError(f"RocketMQ proxy {endpoint} ({outbox.broker_display}) "
                                     f"refused the credentials ({keys}): {exc}") from None
        except (NotFoundException, ForbiddenException):
            pass  # answered, credentials taken; the probe topic need not exist nor be allowed
        except Exception as exc:
            return BrokerUnreachableError(f"RocketMQ proxy {endpoint} unreachable: {exc}")
        finally:
            if producer.is_running:
                producer.shutdown()
    return None


class RocketMQTarget:
    """Publishes to RocketMQ 5 proxies through the official client's ``Producer``.

    ``checker`` answers the check-backs the proxy routes to this producer
    (default: none is expected, and one that comes is answered UNKNOWN);
    ``in_flight`` bounds the halves and ends in flight at once; ``threads``
    bounds the client's blocking calls (start, a topic's first route, shutdown).
    """

    def __init__(self, outbox: Outbox, *, checker: TransactionChecker | None = None,
                 threads: int = 4, in_flight: int = 256) -> None:
        if in_flight < 1:
            raise ConfigurationError(f"in_flight must be >= 1, got {in_flight}",
                                     setting="in_flight")
        self.outbox = outbox
        self.description = f"RocketMQ at {outbox.broker_display}"
        self._checker = checker or _AnswerUnknown()
        self._pool = ThreadPoolExecutor(max_workers=threads,
                                        thread_name_prefix="rocketbox-rocketmq")
        self._in_flight_max = in_flight
        self._in_flight: asyncio.Semaphore | None = None
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        #: where each half of this process went: its end goes to the same proxy
        self._endpoints: dict[str, Any] = {}
        #: topics the proxy gave a route for (a refused one is asked again next pass)
        self._routed: set[str] = set()
        #: per topic, the client's round-robin over the route's writable queues
        self._selectors: dict[str, Any] = {}
        self._ids = MessageIdCodec()
        self._born_host = Misc.get_local_ip()

    async def start(self) -> None:
        await self._run(self._started)

    def _started(self) -> Producer:
        with self._lock:
            if self._producer is None:
                producer = Producer(client_configuration(self.outbox), checker=self._checker,
                                    tls_enable=self.outbox.target_address.tls)
                try:
                    producer.startup()
                except Exception as exc:
                    raise BrokerUnreachableError(
                        f"{self.description}: the client did not start: {exc}") from exc
                self._producer = producer
            return self._producer

    async def _run(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    async def _rpc(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One of the client's asynchronous RPCs, awaited here, at most ``in_flight`` at once."""
        if self._in_flight is None:  # made on the loop that uses it
            self._in_flight = asyncio.Semaphore(self._in_flight_max)
        async with self._in_flight:
            return await asyncio.wrap_future(call(*args, **kwargs))

    def _route(self, producer: Producer, topic: str) -> None:
        """Ask the proxy for ``topic``'s route (its typed answer), then let the client cache
        it: ``_retrieve_topic_route_data`` also puts the topic in the producer's settings,
        so the proxy sends this producer the topic's check-backs, as after ``send``."""
        query_route(producer, topic)
        route = producer._retrieve_topic_route_data(topic)
        self._selectors[topic] = QueueSelector.producer_queue_selector(route)

    async def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        producer = await self._run(self._started)
        new_topics = sorted({m.topic for m in messages} - self._routed)
        routes = await asyncio.gather(*(self._run(self._route, producer, topic)
                                        for topic in new_topics), return_exceptions=True)
        refused: dict[str, BaseException] = {}
        for topic, route in zip(new_topics, routes, strict=True):
            if isinstance(route, BaseException):
                refused[topic] = route
            else:
                self._routed.add(topic)
        answers = await asyncio.gather(*(
            _raise(refused[msg.topic]) if msg.topic in refused
            else self._send_half(producer, msg)
            for msg in messages), return_exceptions=True)
        outcomes: list[HalfOutcome | _Unreachable] = []
        for msg, answer in zip(messages, answers, strict=True):
            if isinstance(answer, HalfStored):
                outcomes.append(answer)
            else:
                outcomes.append(self._refused(msg.tx_id, answer))
        if outcomes and all(isinstance(o, _Unreachable) for o in outcomes):
            raise BrokerUnreachableError(f"{self.description} unreachable: {outcomes[0]}")
        return [o.as_row_error() if isinstance(o, _Unreachable) else o for o in outcomes]

    async def _send_half(self, producer: Producer, msg: OutgoingMessage) -> HalfStored:
        """One half, as ``Producer.send(message, transaction)`` builds it, sent once."""
        queue = self._selectors[msg.topic].select_next_queue()
        request = SendMessageRequest()
        wire = request.messages.add()
        wire.topic.name = msg.topic
        wire.topic.resource_namespace = producer.client_configuration.namespace
        if not msg.body:
            raise PayloadEmptyException("message body is empty")
        wire.body = msg.body
        system = wire.system_properties
        if msg.tag:
            system.tag = msg.tag
        system.keys.extend((msg.tx_id, *msg.keys))
        wire.user_properties.update({name: value for name, value in msg.properties.items()
                                     if name.strip() and value.strip()})
        wire.user_properties[TX_ID_PROPERTY] = msg.tx_id
        system.message_id = self._ids.next_message_id()
        system.message_type = MessageType.TRANSACTION
        system.born_timestamp.GetCurrentTime()
        system.born_host = self._born_host
        system.body_encoding = Encoding.IDENTITY
        config = producer.client_configuration
        response = await self._rpc(producer.rpc_client.send_message_async, queue.endpoints,
                                   request, producer.sign(), timeout=config.request_timeout)
        MessagingResultChecker.check(response.status)
        [entry] = response.entries
        MessagingResultChecker.check(entry.status)
        self._endpoints[entry.message_id] = queue.endpoints
        return HalfStored(msg.tx_id, msg.topic, message_id=entry.message_id,
                          transaction_id=entry.transaction_id)

    async def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        producer = await self._run(self._started)
        answers = await asyncio.gather(*(self._end(producer, end) for end in ends),
                                       return_exceptions=True)
        outcomes: list[EndOutcome | _Unreachable] = []
        for end, answer in zip(ends, answers, strict=True):
            if isinstance(answer, BaseException):
                outcomes.append(self._refused(end.tx_id, answer))
            else:
                outcomes.append(answer)
        if outcomes and all(isinstance(o, _Unreachable) for o in outcomes):
            raise BrokerUnreachableError(f"{self.description} unreachable: {outcomes[0]}")
        return [o.as_row_error() if isinstance(o, _Unreachable) else o for o in outcomes]

    async def _end(self, producer: Producer, end: TxEnd) -> EndOutcome:
        half = end.half
        if not half.message_id or not half.transaction_id:
            return LeftToCheckback(end.tx_id, "no RocketMQ half recorded for this row")
        if end.state not in RESOLUTIONS:
            return LeftToCheckback(end.tx_id, "the row's state is UNKNOWN")
        config = producer.client_configuration
        request = EndTransactionRequest()
        request.topic.name = half.topic
        request.topic.resource_namespace = config.namespace
        request.message_id = half.message_id
        request.transaction_id = half.transaction_id
        request.resolution = RESOLUTIONS[end.state]
        request.source = TransactionSource.SOURCE_CLIENT
        endpoints = self._endpoints.pop(half.message_id, None) or config.rpc_endpoints
        response = await self._rpc(producer.rpc_client.end_transaction_async, endpoints,
                                   request, metadata=producer.sign(),
                                   timeout=config.request_timeout)
        code, text = int(response.status.code), str(response.status.message)
        if code == Code.OK:
            return TxEnded(end.tx_id)
        if is_transaction_gone(code, text):
            return LeftToCheckback(end.tx_id, f"the proxy no longer holds the transaction "
                                              f"({text})")
        fault = RowFault.CONFIG if code in (Code.UNAUTHORIZED, Code.FORBIDDEN,
                                            Code.TOPIC_NOT_FOUND) else RowFault.TRANSIENT
        return RowRefusedError(f"{Code.Name(code)}: {text}", tx_id=end.tx_id, kind=fault,
                               target=self.description)

    def _refused(self, tx_id: str, exc: BaseException) -> RowRefusedError | _Unreachable:
        if not isinstance(exc, Exception):
            raise exc
        fault = fault_of(exc)
        if fault is None and _unreachable(exc):
            return _Unreachable(tx_id, exc, self.description)
        error = RowRefusedError(str(exc), tx_id=tx_id, kind=fault or RowFault.TRANSIENT,
                                target=self.description)
        error.__cause__ = exc
        return error

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """The client reconnects by itself and says nothing of it: never called."""

    async def close(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            await self._run(producer.shutdown)
        self._pool.shutdown(wait=False)


async def _raise(exc: BaseException) -> NoReturn:
    """An awaitable failing with ``exc`` (a row whose topic's route was refused)."""
    raise exc


class _Unreachable:
    """A call that did not get through; all of a request's calls so: the pass fails."""

    def __init__(self, tx_id: str, exc: Exception, target: str) -> None:
        self.tx_id, self.exc, self.target = tx_id, exc, target

    def __str__(self) -> str:
        return str(self.exc) or type(self.exc).__name__

    def as_row_error(self) -> RowRefusedError:
        error = RowRefusedError(f"no answer: {self}", tx_id=self.tx_id,
                                kind=RowFault.TRANSIENT, target=self.target)
        error.__cause__ = self.exc
        return error


class _AnswerUnknown(TransactionChecker):  # type: ignore[misc]  # the client is untyped
    """A check-back routed to a producer without a status-table checker: ask again later."""

    def check(self, message: Message) -> Any:
        log.info("check-back for %s answered UNKNOWN (no status-table checker here)",
                 message.message_id)
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
