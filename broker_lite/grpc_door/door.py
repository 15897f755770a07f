"""What every call of the gRPC door shares: the broker, the clients, the pop state.

:class:`GrpcDoor` is to the gRPC door what ``ServerContext`` is to the native
one (and it holds that context: the broker, the ACL, the event loop, the
flush waits). :class:`Waker` lets a long-polling receive sleep until
something it could receive may have appeared: a message arriving on its topic
(the broker's arrival listener, from any thread), an ack that frees a FIFO
message group, a changed invisible duration.

The door runs two rounds of its own on the event loop: the housekeeping of
clients (every 5 s; in proxy mode it also drops expired transaction data) and
the revive (every ``revive_interval_seconds``), which expires in-flight
messages, dead-letters those that used their last delivery and saves what is
in flight to ``pop.json`` (:mod:`~broker_lite.grpc_door.pop`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from broker_lite.core.log_safe import printable
from broker_lite.grpc_door.auth import Authenticator, Caller, ClientOwners, metadata_dict
from broker_lite.grpc_door.config import GrpcDoorConfig
from broker_lite.grpc_door.pop import PopService
from broker_lite.grpc_door.pop_state import FILE_NAME, PopRecord, load_records, save_records
from broker_lite.grpc_door.proxy_mode import ProxyMode
from broker_lite.grpc_door.settings import ClientInfo, ClientRegistry
from broker_lite.serving.context import ServerContext
from broker_lite.serving.waiters import KeyedWaiters

__all__ = ["GrpcDoor", "Waker"]

log = logging.getLogger("broker_lite.grpc")

_HOUSEKEEPING_SECONDS = 5.0


class Waker(KeyedWaiters[str]):
    """Futures of the receives waiting on a topic, woken when the topic may have news."""

    def arrived(self, topic: str, queue_id: int) -> None:
        """The broker's arrival listener: any thread, costs nothing when nobody waits."""
        self.wake(topic)


class GrpcDoor:
    """The live state behind the ``MessagingService``, one per running broker."""

    def __init__(self, ctx: ServerContext, config: GrpcDoorConfig | None = None) -> None:
        self.ctx = ctx
        self.broker = ctx.broker
        self.config = config or GrpcDoorConfig()
        self.auth = Authenticator(ctx.acl, clock_skew_seconds=self.config.clock_skew_seconds)
        self.clients = ClientRegistry(self.broker.config.client_expiry)
        #: under an ACL: which account each client id belongs to
        self.owners = ClientOwners(self.broker.config.client_expiry)
        self.pop = PopService(self.broker, self.config, client_alive=self.clients.alive)
        self.waker = Waker(ctx.loop)
        self.broker.add_arrival_listener(self.waker.arrived)
        #: the proxy mode's state (``--grpc-proxy-semantics``); ``None`` by default
        self.proxy = ProxyMode(self.broker, self.config) if self.config.proxy_semantics else None
        #: where clients reach this door when a request names no endpoint ("host", port)
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.channels: set[Any] = set()
        self._housekeeping: asyncio.Task[None] | None = None
        self._revival: asyncio.Task[None] | None = None
        self._pop_path = self.broker.config.store.data_dir / FILE_NAME
        self._saved: list[PopRecord] = []

    @property
    def store_host(self) -> str:
        return self.broker.config.store.store_host

    def caller(self, context: Any) -> Caller:
        """Who sent this call; GrpcDoorError / UnauthorizedError when refused (also when
        the client id belongs to another account)."""
        caller = self.auth.caller(metadata_dict(context.invocation_metadata()), context.peer())
        if caller.account is not None:
            self.owners.claim(caller.client_id, caller.account.access_key)
        return caller

    def start(self) -> None:
        """Take back the in-flight messages of the last run, start the door's rounds."""
        self._saved = load_records(self._pop_path)
        restored = self.pop.restore(self._saved)
        if restored:
            log.info("%d in-flight message(s) restored from %s", restored, self._pop_path)
        if self.proxy is not None:
            log.info("gRPC door in RocketMQ proxy mode: transaction data kept %g s, in this "
                     "process only", self.config.transaction_data_expire_seconds)
        self._housekeeping = self.ctx.loop.create_task(self._expire_clients(),
                                                       name="grpc-door-housekeeping")
        self._revival = self.ctx.loop.create_task(self._revive(), name="grpc-door-revive")

    async def close(self) -> None:
        """End every Telemetry stream (so the server's shutdown need not wait for them),
        and save what is in flight."""
        for task in (self._housekeeping, self._revival):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._housekeeping = self._revival = None
        await self._save()
        for channel in list(self.channels):
            channel.close()

    # -- the revive ------------------------------------------------------------------------

    async def _revive(self) -> None:
        while True:
            await asyncio.sleep(self.config.revive_interval_seconds)
            try:
                moved, woken = self.pop.revive()
                if moved:
                    log.info("%d message(s) used their last delivery: moved to the DLQ", moved)
                for topic in woken:
                    self.waker.wake_now(topic)
                await self._save()
            except Exception:  # one bad round must not end the revive for good
                log.exception("revive round failed")

    async def _save(self) -> None:
        records = self.pop.snapshot()
        if records != self._saved and await asyncio.to_thread(save_records, self._pop_path,
                                                              records):
            self._saved = records

    # -- clients -------------------------------------------------------------------------

    def register(self, info: ClientInfo) -> None:
        """Tell the core about a client connected by a Telemetry stream (its check-backs)."""
        if info.channel is not None and info.channel.is_alive():
            self.broker.register(info.registration(), info.channel)

    def stream_closed(self, channel: Any) -> None:
        self.channels.discard(channel)
        self.broker.channel_closed(channel)
        info = self.clients.channel_closed(channel)
        if info is not None:
            self.release(info.client_id, info)

    def terminated(self, client_id: str) -> None:
        info = self.clients.remove(client_id)
        self.broker.unregister(client_id, info.channel if info is not None else None)
        self.release(client_id, info)

    def release(self, client_id: str, info: ClientInfo | None) -> None:
        """What the client held by auto-renewal becomes visible again shortly."""
        if self.pop.client_gone(client_id) and info is not None:
            for topic in info.subscriptions:
                self.waker.wake_now(topic)

    async def _expire_clients(self) -> None:
        while True:
            await asyncio.sleep(_HOUSEKEEPING_SECONDS)
            for client_id in self.clients.expire():
                log.info("gRPC client %s expired (no heartbeat)", printable(client_id))
                self.pop.client_gone(client_id)
            self.owners.prune()
            if self.proxy is not None:
                self.proxy.housekeeping()
