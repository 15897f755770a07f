"""The relay's seam to the broker: a :class:`Publisher` Protocol and broker_lite's.

A publisher sends halves for many rows in one request, and ends many
transactions in one request; each item succeeds or fails on its own.
broker_lite makes both idempotent per transaction id, so a relay that sends
the same row twice never makes a second message.

A request the broker refuses as a whole (an ACL refusal for one row's topic,
a frame over the size limit) says nothing about which row is at fault, so
:class:`BrokerLitePublisher` splits it in two and sends each half again,
until every row has an outcome of its own: the rows that can go go, and only
the row at fault gets the error (and counts an attempt). A request that did
not get through at all (the broker unreachable) is not split: no row is at
fault, and :class:`~outbox.errors.BrokerUnreachableError` is raised.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from broker_lite.client import AsyncProducer
from broker_lite.client.loop_thread import LoopThread
from broker_lite.errors import BrokerError, ResponseCode, UnavailableError, error_for_code
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError

log = logging.getLogger("rocketbox.relay")
T = TypeVar("T")
ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")

__all__ = ["BrokerLitePublisher", "HalfSent", "OutgoingMessage", "ProcessPublishers", "Publisher",
           "TxEnded"]


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    tx_id: str
    topic: str
    body: bytes
    tag: str | None
    keys: tuple[str, ...]
    message_group: str | None
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class HalfSent:
    tx_id: str
    half_offset: int
    queue_offset: int


@dataclass(frozen=True, slots=True)
class TxEnded:
    tx_id: str
    commit_offset: int  # -1 for a rollback


class Publisher(Protocol):
    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfSent | Exception]: ...

    def end(self, ends: Sequence[tuple[str, str, int, int]]) -> list[TxEnded | Exception]:
        """``(tx_id, state, half_offset, half_queue_offset)`` each; offsets -1 if unknown."""
        ...

    def close(self) -> None: ...


class BrokerLitePublisher:
    """Publishes through broker_lite's native client: one connection, one request per batch.

    It connects under its own producer group (``<group>-relay``), so the
    broker never routes check-backs to it; the halves and their ends carry the
    outbox's producer group, whose check-backs ``rocketbox checker`` answers.
    """

    def __init__(self, outbox: Outbox, *, client_id: str | None = None) -> None:
        self._group = outbox.producer_group
        self._timeout = outbox.relay.broker_timeout
        self._producer = AsyncProducer(outbox.producer_group + "-relay", outbox.broker,
                                       access_key=outbox.access_key,
                                       secret_key=outbox.secret_key,
                                       timeout=outbox.relay.broker_timeout, client_id=client_id)
        self._loop: LoopThread | None = None
        self._lock = threading.Lock()

    def _request(self, code: RequestCode, body: Any, kind: type[T]) -> T:
        with self._lock:
            if self._loop is None:
                loop = LoopThread("rocketbox-relay")
                try:
                    loop.run(self._producer.start(), self._timeout)
                except BrokerError as exc:
                    loop.stop()
                    raise BrokerUnreachableError(f"broker unreachable: {exc}") from exc
                self._loop = loop
            loop = self._loop
        try:
            result: T = loop.run(self._producer.session.request(code, body, kind),
                                 self._timeout * 2)
        except (UnavailableError, TimeoutError) as exc:
            # the request as a whole did not get through: no row is at fault
            raise BrokerUnreachableError(f"broker unreachable: {exc}") from exc
        return result

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfSent | Exception]:
        return _one_outcome_each(list(messages), self._send_halves)

    def _send_halves(self, messages: list[OutgoingMessage]) -> list[HalfSent | Exception]:
        """One request; raises :class:`BrokerError` when the broker refuses it whole."""
        wires = [m.WireMessage(topic=msg.topic, body=msg.body, tags=msg.tag, keys=list(msg.keys),
                               properties=msg.properties, msg_id=msg.tx_id,
                               sharding_key=msg.message_group, transactional=True)
                 for msg in messages]
        response = self._request(RequestCode.SEND_BATCH, m.SendBatchRequest(
            producer_group=self._group, messages=wires), m.SendBatchResponse)
        out: list[HalfSent | Exception] = []
        for msg, item in zip(messages, response.results, strict=True):
            if item.code == ResponseCode.SUCCESS and item.result is not None:
                out.append(HalfSent(msg.tx_id, item.result.commit_log_offset,
                                    item.result.queue_offset))
            else:
                body = item.error or m.ErrorBody(message="no result")
                out.append(error_for_code(item.code, body.message, retriable=body.retriable))
        return out

    def end(self, ends: Sequence[tuple[str, str, int, int]]) -> list[TxEnded | Exception]:
        return _one_outcome_each(list(ends), self._end)

    def _end(self, ends: list[tuple[str, str, int, int]]) -> list[TxEnded | Exception]:
        """One request; raises :class:`BrokerError` when the broker refuses it whole."""
        items = [m.EndTransactionRequest(producer_group=self._group, transaction_id=tx_id,
                                         state=_STATES.get(state, m.TxState.UNKNOWN),
                                         commit_log_offset=half_offset,
                                         queue_offset=queue_offset, msg_id=tx_id)
                 for tx_id, state, half_offset, queue_offset in ends]
        response = self._request(RequestCode.END_TRANSACTION_BATCH,
                                 m.EndTransactionBatchRequest(items=items),
                                 m.EndTransactionBatchResponse)
        out: list[TxEnded | Exception] = []
        for (tx_id, *_rest), code, result, error in zip(
                ends, response.codes, response.results, response.errors, strict=True):
            if code == ResponseCode.SUCCESS and result is not None:
                out.append(TxEnded(tx_id, result.commit_log_offset))
            else:
                body = error or m.ErrorBody(message="no result")
                out.append(error_for_code(code, body.message, retriable=body.retriable))
        return out

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            try:
                loop.run(self._producer.shutdown(), self._timeout)
            finally:
                loop.stop()


_STATES = {"COMMIT": m.TxState.COMMIT, "ROLLBACK": m.TxState.ROLLBACK}


def _one_outcome_each(items: list[ItemT],
                      send: Callable[[list[ItemT]], list[ResultT | Exception]]
                      ) -> list[ResultT | Exception]:
    """``send(items)``, split in halves while the broker refuses a request whole.

    Each row ends with its own outcome: a refusal that stays with a single row
    is that row's error. With one bad row in ``n``, this costs about
    ``2 * log2(n)`` extra requests, and only when something is wrong.
    """
    if not items:
        return []
    try:
        return send(items)
    except BrokerError as exc:
        if len(items) == 1:
            return [exc]
        log.info("the broker refused a request of %d rows whole (%s); splitting it",
                 len(items), exc)
    middle = len(items) // 2
    return _one_outcome_each(items[:middle], send) + _one_outcome_each(items[middle:], send)


class ProcessPublishers:
    """One publisher per process, made on first use.

    A publisher is thread-safe, so the threads of a process share it; a forked
    child makes its own (the parent's connection and loop thread do not
    survive a fork) and never touches the parent's.
    """

    def __init__(self, make: Callable[[], Publisher]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._by_pid: dict[int, Publisher] = {}

    def get(self) -> Publisher:
        pid = os.getpid()
        with self._lock:
            publisher = self._by_pid.get(pid)
            if publisher is None:
                publisher = self._by_pid[pid] = self._make()
            return publisher

    def close(self) -> None:
        """Close this process's publisher, if it made one (shutdown, tests)."""
        with self._lock:
            publisher = self._by_pid.pop(os.getpid(), None)
            self._by_pid.clear()  # a parent's, inherited by fork: not ours to close
        if publisher is not None:
            try:
                publisher.close()
            except Exception:
                logging.getLogger("rocketbox.outbox").warning(
                    "closing the broker publisher failed", exc_info=True)
