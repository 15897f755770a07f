"""Telemetry, Heartbeat and NotifyClientTermination: the client's life on the gRPC door.

**Telemetry** is a bidirectional stream each client opens to each endpoint.
The client writes its ``Settings``; the door answers with a
``TelemetryCommand`` carrying status OK and the merged settings
(:func:`~broker_lite.grpc_door.settings.answer_settings`), and registers the
client with the core (``Broker.register``), the stream being the client's
:class:`~broker_lite.core.clients.Channel`. That is how v5 does check-back:
when the core's check service finds an orphaned half, it calls
:meth:`TelemetryChannel.send_check` (from a worker thread) on a stream of one
of the half's producers, which writes a ``RecoverOrphanedTransactionCommand``
(the half as a message, and its transaction id). The client runs its
``TransactionChecker`` and answers with an ``EndTransaction`` call whose
source is SERVER_CHECK (:mod:`~broker_lite.grpc_door.send`). In proxy mode
the door keeps the half's transaction data as it writes the check, so that
answer can end the half once, within the window, as with RocketMQ's proxy
(``AbstractProxyRelayService.processCheckTransactionState``).

Settings that are refused (bad topic or group, no permission, SQL filter)
are answered with a ``TelemetryCommand`` carrying only the error status, and
the stream stays open; a stream whose metadata fails authentication is
answered UNAUTHORIZED and ended.

When the stream ends the core forgets the channel, and the messages the
client held by auto-renewal become visible again shortly.

**Heartbeat** keeps the client (and its core registration) alive; a client
that sent no settings yet gets UNRECOGNIZED_CLIENT_TYPE, as from the proxy.
**NotifyClientTermination** forgets the client at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from rocketmq.grpc_protocol import service_pb2 as spb

from broker_lite.core.acl import Account, Acl
from broker_lite.core.model import CheckRequest
from broker_lite.grpc_door.auth import Caller, check_consume, check_producer, may_check
from broker_lite.grpc_door.convert import to_proto
from broker_lite.grpc_door.door import GrpcDoor
from broker_lite.grpc_door.route import validate_group, validate_topic_name
from broker_lite.grpc_door.settings import PRODUCER, ClientInfo, answer_settings
from broker_lite.grpc_door.status import Code, GrpcDoorError, ok, status, status_for

__all__ = ["TelemetryChannel", "heartbeat", "notify_client_termination", "telemetry"]

log = logging.getLogger("broker_lite.grpc")

_CLOSED = object()


class TelemetryChannel:
    """One client's Telemetry stream, as the core's check-back ``Channel``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client_id: str, remote_address: str,
                 store_host: str, *,
                 on_check: Callable[[CheckRequest], CheckRequest] | None = None,
                 acl: Acl | None = None, access_key: str = "") -> None:
        self.client_id = client_id
        self._acl = acl
        self._access_key = access_key
        self.remote_address = remote_address
        self._loop = loop
        self._store_host = store_host
        self._outgoing: asyncio.Queue[Any] = asyncio.Queue()
        self._alive = True
        self._on_check = on_check
        self.checks_sent = 0

    def __repr__(self) -> str:
        return f"<TelemetryChannel {self.client_id} {self.remote_address}>"

    @property
    def account(self) -> Account | None:
        """The stream's account as the ACL has it now (``None`` without an ACL)."""
        return self._acl.current(self._access_key) if self._acl is not None else None

    def may_check(self, producer_group: str, topic: str) -> bool:
        """Only a producer with Pub on the group (its topic) and the half's topic gets
        its check-back, and the half's body with it."""
        return may_check(self.account, producer_group, topic)

    def is_alive(self) -> bool:
        return self._alive

    def send_check(self, request: CheckRequest) -> None:
        """The core's check service asks (from any thread): write the check on the stream.

        A stream that closed since the core picked it drops the check; the core
        checks the half again at its next round.
        """
        if self._alive:
            try:
                self._loop.call_soon_threadsafe(self._write_check, request)
                return
            except RuntimeError:  # the loop is closed: the server is gone
                self._alive = False
        log.info("check-back of %s not sent: the Telemetry stream of %s is closed",
                 request.transaction_id, self.client_id)

    def _write_check(self, request: CheckRequest) -> None:
        if not self._alive:
            return
        if self._on_check is not None:
            request = self._on_check(request)
        command = spb.RecoverOrphanedTransactionCommand(
            message=to_proto(request.message, store_host=self._store_host),
            transaction_id=request.transaction_id)
        self.write(spb.TelemetryCommand(recover_orphaned_transaction_command=command))
        self.checks_sent += 1

    def write(self, command: Any) -> None:
        if self._alive:
            self._outgoing.put_nowait(command)

    def close(self) -> None:
        if self._alive:
            self._alive = False
            self._outgoing.put_nowait(_CLOSED)

    async def commands(self) -> AsyncIterator[Any]:
        while True:
            command = await self._outgoing.get()
            if command is _CLOSED:
                return
            yield command


def _check_settings(caller: Caller, settings: Any) -> None:
    if settings.WhichOneof("pub_sub") == "publishing":
        for topic in settings.publishing.topics:
            check_producer(caller.account, validate_topic_name(topic.name))
    elif settings.WhichOneof("pub_sub") == "subscription":
        group = validate_group(settings.subscription.group.name)
        for entry in settings.subscription.subscriptions:
            check_consume(caller.account, validate_topic_name(entry.topic.name), group)


def _apply_settings(door: GrpcDoor, caller: Caller, channel: TelemetryChannel,
                    settings: Any) -> Any:
    _check_settings(caller, settings)
    info = door.clients.update(caller.client_id, settings, channel)
    door.register(info)
    answer = answer_settings(info, door.config,
                             max_body_size=door.broker.config.store.max_message_size,
                             delay_time_scale=door.broker.config.delay_time_scale)
    return spb.TelemetryCommand(status=ok(), settings=answer)


async def _read(door: GrpcDoor, caller: Caller, channel: TelemetryChannel,
                commands: AsyncIterator[Any]) -> None:
    try:
        async for command in commands:
            kind = command.WhichOneof("command")
            if kind != "settings":
                continue  # thread stack traces and verify results: nothing asked for them
            try:
                channel.write(_apply_settings(door, caller, channel, command.settings))
            except Exception as exc:
                channel.write(spb.TelemetryCommand(status=status_for(exc, what="Telemetry")))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the stream broke (client gone, malformed frame)
        log.debug("Telemetry stream of %s ended: %s", caller.client_id, exc)
    finally:
        channel.close()


async def telemetry(door: GrpcDoor, commands: AsyncIterator[Any],
                    context: Any) -> AsyncIterator[Any]:
    try:
        caller = door.caller(context)
    except Exception as exc:
        yield spb.TelemetryCommand(status=status_for(exc, what="Telemetry"))
        return
    channel = TelemetryChannel(door.ctx.loop, caller.client_id, caller.peer, door.store_host,
                               on_check=door.proxy.check_sent if door.proxy else None,
                               acl=door.ctx.acl,
                               access_key=caller.account.access_key if caller.account else "")
    door.channels.add(channel)
    reader = asyncio.ensure_future(_read(door, caller, channel, commands))
    try:
        async for command in channel.commands():
            yield command
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        channel.close()
        door.stream_closed(channel)
        log.debug("Telemetry stream of %s closed", caller.client_id)


def heartbeat(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    info: ClientInfo | None = door.clients.touch(caller.client_id)
    if info is None:
        return spb.HeartbeatResponse(status=status(
            Code.UNRECOGNIZED_CLIENT_TYPE,
            f"no settings from client {caller.client_id} yet: open a Telemetry stream and "
            "send them first"))
    if info.client_type == PRODUCER:
        for topic in info.topics:
            check_producer(caller.account, topic)
    else:
        group = validate_group(request.group.name if request.HasField("group") else info.group)
        if group != info.group:
            raise GrpcDoorError(Code.ILLEGAL_CONSUMER_GROUP,
                                f"heartbeat for group {group!r}, but the settings say "
                                f"{info.group!r}")
        for topic in info.subscriptions:
            check_consume(caller.account, topic, group)
    door.register(info)
    return spb.HeartbeatResponse(status=ok())


def notify_client_termination(door: GrpcDoor, caller: Caller, request: Any) -> Any:
    door.terminated(caller.client_id)
    return spb.NotifyClientTerminationResponse(status=ok())
