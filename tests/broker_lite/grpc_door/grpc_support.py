"""Helpers for the gRPC door tests: the official RocketMQ 5 client against a real broker.

The official client (``rocketmq-python-client``) starts threads per client
and one shared asyncio loop thread per process; :func:`running` always shuts
a client down, so no scheduler thread outlives its test. Its log goes to
``~/logs/rocketmq_python``; :class:`ClientLog` also keeps its records in
memory so a test can read what the client saw.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar

import grpc
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import service_pb2_grpc
from rocketmq.v5.util.signature import Signature

from tests import support
from tests.support import wait_until

__all__ = [
    "FAST_GRPC_BROKER",
    "Checker",
    "ClientLog",
    "Clients",
    "Clock",
    "StartGrpcBroker",
    "config",
    "make_message",
    "raw_metadata",
    "raw_stub",
    "receive",
    "running",
    "send_bodies",
    "simple_consumer",
]

#: ``serve`` flags that keep waits short: check-backs after ~1 s, 3 deliveries before the DLQ
FAST_GRPC_BROKER = ("--delay-time-scale", "0.01", "--tx-timeout", "1",
                    "--tx-check-interval", "0.5", "--grpc-max-delivery-attempts", "3")

#: the ``start_grpc_broker`` fixture: ``start_grpc_broker(*extra_args, data_dir=None)``
StartGrpcBroker = support.StartBroker


class Clients(Protocol):
    def startup(self) -> None: ...

    def shutdown(self) -> None: ...


C = TypeVar("C", bound=Clients)


@contextlib.contextmanager
def running(client: C) -> Iterator[C]:
    """``startup()`` the client, and ``shutdown()`` it whatever happens."""
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def config(endpoint: str, ak: str = "", sk: str = "", *, timeout: int = 5) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=timeout)


def make_message(topic: str, body: bytes | str, *, tag: str | None = None,
                 keys: Sequence[str] = (), properties: dict[str, str] | None = None,
                 group: str | None = None, deliver_at: int | None = None) -> Message:
    """An official-client message; ``deliver_at`` is in whole seconds since the epoch."""
    msg = Message()
    msg.topic = topic
    msg.body = body.encode() if isinstance(body, str) else body
    if tag is not None:
        msg.tag = tag
    if keys:
        msg.keys = keys[0]
        for key in keys[1:]:
            msg.keys = key
    for name, value in (properties or {}).items():
        msg.add_property(name, value)
    if group is not None:
        msg.message_group = group
    if deliver_at is not None:
        msg.delivery_timestamp = deliver_at
    return msg


def simple_consumer(endpoint: str, group: str, topic: str) -> SimpleConsumer:
    """An official SimpleConsumer of every tag of ``topic``; a receive long-polls a second."""
    return SimpleConsumer(config(endpoint), group, {topic: FilterExpression()}, await_duration=1)


def send_bodies(endpoint: str, topic: str, *bodies: str) -> list[str]:
    """Send each body to ``topic`` with an official producer of its own; the message ids."""
    with running(Producer(config(endpoint), (topic,))) as producer:
        return [producer.send(make_message(topic, body)).message_id for body in bodies]


def receive(consumer: SimpleConsumer, count: int, *, timeout: float = 20.0,
            invisible: int = 10, ack: bool = True, batch: int = 16) -> list[Any]:
    """Receive (and ack) until ``count`` messages came; at most one poll past them."""
    got: list[Any] = []

    def more() -> bool:
        try:
            received = consumer.receive(batch, invisible)
        except Exception as exc:  # the official client's one transient it raises bare
            if "failed to fetch topic" not in str(exc):
                raise
            return False  # its route query timed out (a loaded machine): ask again
        for msg in received:
            got.append(msg)
            if ack:
                consumer.ack(msg)
        return len(got) >= count

    wait_until(more, timeout=timeout, interval=0.01,
               message=lambda: f"{len(got)} of {count} messages received")
    return got


class ClientLog(logging.Handler):
    """Records of the official client's logger, kept in memory while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._lock2 = threading.Lock()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock2:
            self.lines.append(record.getMessage())

    def text(self) -> str:
        with self._lock2:
            return "\n".join(self.lines)

    @contextlib.contextmanager
    def installed(self) -> Iterator[ClientLog]:
        logger = logging.getLogger("rocketmq-python-client")
        logger.addHandler(self)
        try:
            yield self
        finally:
            logger.removeHandler(self)


@contextlib.contextmanager
def raw_stub(endpoint: str) -> Iterator[Any]:
    """A bare ``MessagingServiceStub`` (sync grpc) for requests the client never sends."""
    with grpc.insecure_channel(endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def raw_metadata(client_id: str = "raw-test-client", ak: str = "", sk: str = "", *,
                 date_time: str | None = None) -> list[tuple[str, str]]:
    """The metadata the official client signs its calls with (its own ``Signature``);
    ``date_time`` re-signs it for another ``x-mq-date-time``."""

    class _Config:
        credentials = Credentials(ak, sk)
        namespace = ""

    metadata = list(Signature.metadata(_Config(), client_id))
    if date_time is None:
        return metadata
    header = (f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, "
              f"Signature={Signature.sign(sk, date_time)}")
    replaced = {"x-mq-date-time": date_time, "authorization": header}
    return [(k, replaced.get(k, v)) for k, v in metadata]


def now_seconds() -> int:
    return int(time.time())


class Checker(TransactionChecker):
    """Answers every check-back with ``resolution`` and records the messages it was asked."""

    def __init__(self, resolution: int = TransactionResolution.COMMIT) -> None:
        self.resolution = resolution
        self._lock = threading.Lock()
        self.asked: list[Message] = []

    def check(self, message: Message) -> int:
        with self._lock:
            self.asked.append(message)
        return self.resolution

    def count(self) -> int:
        with self._lock:
            return len(self.asked)


class Clock:
    """A monotonic clock the test moves (``clock.now += 30``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now
