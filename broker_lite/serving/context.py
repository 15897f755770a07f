"""What every connection of the native door shares: settings, the broker, the ACL.

:class:`ServerConfig` is the server layer's own frozen config (the CLI builds
it from flags); :class:`ServerContext` bundles it with the live objects;
:class:`Session` is what a request handler may know about the connection it
serves, kept as a ``Protocol`` so handlers do not import the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from broker_lite.core import Broker
from broker_lite.core.acl import Account, Acl
from broker_lite.core.model import CheckRequest
from broker_lite.errors import ConfigurationError
from broker_lite.protocol import DEFAULT_MAX_FRAME_SIZE
from broker_lite.serving.flushgate import FlushGate
from broker_lite.serving.longpoll import ArrivalHub

__all__ = ["MAX_LONG_POLL_MS", "ServerConfig", "ServerContext", "Session"]

log = logging.getLogger("broker_lite.server")

#: a PULL never holds longer than this, whatever it asks for
MAX_LONG_POLL_MS = 30_000
_MIN_FRAME_SIZE = 64 * 1024

T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerConfig:
    """Settings of the network doors (the broker core has its own BrokerConfig)."""

    host: str = "127.0.0.1"
    #: native protocol port; 0 picks a free one
    port: int = 10911
    #: gRPC port; 0 picks a free one; ``None``: no gRPC door (it needs the ``rocketmq`` extra)
    grpc_port: int | None = 0
    #: frames (header included) over this many bytes are refused, both ways
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    #: requests of one connection being served at once; the reader waits beyond it
    max_inflight_per_connection: int = 1024
    #: a sync-flush acknowledgement waits this long for its fsync (RocketMQ: 5 s)
    flush_timeout: float = 5.0
    #: a check-back request waits this long for the producer's answer
    check_reply_timeout: float = 30.0
    #: a connection that has not said HELLO within this many seconds is closed
    hello_timeout: float = 30.0
    #: allow binding a non-loopback host without an ACL
    insecure: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536 or not 0 <= (self.grpc_port or 0) < 65536:
            raise ConfigurationError(
                f"ports must be in [0, 65535], got {self.port} and {self.grpc_port}",
                setting="port, grpc_port")
        if self.max_frame_size < _MIN_FRAME_SIZE:
            raise ConfigurationError(
                f"max_frame_size must be at least {_MIN_FRAME_SIZE} bytes, "
                f"got {self.max_frame_size}", setting="max_frame_size")
        if self.max_inflight_per_connection < 1:
            raise ConfigurationError("max_inflight_per_connection must be at least 1",
                                     setting="max_inflight_per_connection")
        if min(self.flush_timeout, self.check_reply_timeout, self.hello_timeout) <= 0:
            raise ConfigurationError("flush_timeout, check_reply_timeout and hello_timeout must be "
                                     "positive",
                                     setting="flush_timeout, check_reply_timeout, hello_timeout")


class Session(Protocol):
    """The connection a request arrived on, as handlers see it (also a core ``Channel``)."""

    client_id: str
    remote_address: str

    @property
    def account(self) -> Account | None:
        """The authenticated account as the ACL has it now; ``None`` without an ACL."""
        ...

    def may_check(self, producer_group: str, topic: str) -> bool:
        """Whether this connection may get the check-backs of ``producer_group``'s halves
        of ``topic`` (and their bodies)."""
        ...

    def is_alive(self) -> bool: ...

    def send_check(self, request: CheckRequest) -> None: ...

    def mark_registered(self) -> None:
        """Remember to tell the broker ``channel_closed`` when the connection ends."""


@dataclass(slots=True, kw_only=True)
class ServerContext:
    """The live objects behind the native door, one per running server."""

    broker: Broker
    config: ServerConfig
    acl: Acl | None
    hub: ArrivalHub
    loop: asyncio.AbstractEventLoop
    #: tasks that outlive a request (check-back answers); awaited at shutdown
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    #: sync flush mode: where requests wait for durability (made on first use)
    flush_gate: FlushGate | None = None

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``coro`` as a tracked background task; its failure is logged, never raised."""
        task = self.loop.create_task(coro, name=name)
        self.background.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any) -> bool:
        """Hand ``callback`` to the loop from any thread; False once the loop is closed."""
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop is closed: the server is gone
            return False
        return True
