"""Run a broker: both doors, the periodic work, and a graceful shutdown.

:class:`BrokerRuntime` owns the process-level life of a broker:

1. bind the native socket (so the real port is known, and recorded as the
   store host), open the :class:`~broker_lite.core.Broker` in a worker thread
   (recovery may take a while), start the gRPC server with the RocketMQ v5
   ``MessagingService`` (:mod:`broker_lite.grpc_door`) and the native server;
2. run the broker's periodic methods, each in a worker thread so the event
   loop never blocks; a failure is logged and the task goes on;
3. on :meth:`BrokerRuntime.request_stop` (SIGTERM/SIGINT in :func:`serve`):
   stop accepting, close connections, let the periodic work finish its round,
   wait for check-back resolutions, then ``broker.persist()`` and
   ``broker.close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import signal
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker_lite.core import Broker, BrokerConfig
from broker_lite.core.acl import Acl
from broker_lite.errors import ConfigurationError
from broker_lite.extras import missing_extra, needs_extra
from broker_lite.runtime.periodic import Periodic, schedule_for
from broker_lite.server.native import NativeServer, bind_socket, format_address
from broker_lite.serving.context import ServerConfig, ServerContext
from broker_lite.serving.longpoll import ArrivalHub

if TYPE_CHECKING:
    from broker_lite.grpc_door import GrpcDoor, GrpcDoorConfig

__all__ = ["BindRefused", "BrokerRuntime", "check_bind_policy", "is_loopback", "serve"]

#: how often the ACL file is looked at; a change applies to every request after it
ACL_RELOAD_SECONDS = 1.0

log = logging.getLogger("broker_lite.server")

_SHUTDOWN_GRACE = 10.0


class BindRefused(ConfigurationError):
    """An open broker (no ACL) was asked to listen beyond loopback without ``insecure``."""

    def __init__(self, message: str, *, host: str) -> None:
        super().__init__(message, setting="host")
        self.host = host


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def check_bind_policy(host: str, *, acl: Acl | None, insecure: bool) -> None:
    """Refuse to expose a broker without an ACL beyond loopback, unless told to."""
    if acl is None and not insecure and not is_loopback(host):
        raise BindRefused(
            f"refusing to listen on {host!r} without an ACL: anyone who can reach it could "
            f"send, consume and end transactions. Pass --acl FILE, or --insecure to accept that",
            host=host)


class BrokerRuntime:
    """A running broker with its doors; start with :meth:`start`, end with :meth:`stop`."""

    def __init__(self, broker_config: BrokerConfig, server_config: ServerConfig, *,
                 acl: Acl | None = None, grpc_config: GrpcDoorConfig | None = None,
                 open_broker: Callable[[BrokerConfig], Broker] = Broker) -> None:
        self.broker_config = broker_config
        #: opens the core (``Broker``; a test passes one built with a fault)
        self.open_broker = open_broker
        self.server_config = server_config
        self.acl = acl
        self.grpc_config = grpc_config
        self.native_address = ""
        self.grpc_address = ""
        self.broker: Broker | None = None
        self._native: NativeServer | None = None
        self._grpc: Any = None
        self.grpc_door: GrpcDoor | None = None
        self._periodic: list[Periodic] = []
        self._ctx: ServerContext | None = None
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @property
    def ready_line(self) -> str:
        return f"broker_lite ready native={self.native_address} grpc={self.grpc_address}"

    async def start(self) -> None:
        """Open the broker and make both doors listen. Raises if any step fails."""
        cfg = self.server_config
        check_bind_policy(cfg.host, acl=self.acl, insecure=cfg.insecure)
        self._loop = asyncio.get_running_loop()
        sock = bind_socket(cfg.host, cfg.port)
        try:
            self.native_address = format_address(sock)
            store = dataclasses.replace(self.broker_config.store, store_host=self.native_address)
            config = dataclasses.replace(self.broker_config, store=store)
            self.broker = await asyncio.to_thread(self.open_broker, config)
            hub = ArrivalHub(self._loop)
            self.broker.add_arrival_listener(hub.notify)
            self._ctx = ServerContext(broker=self.broker, config=cfg, acl=self.acl, hub=hub,
                                      loop=self._loop)
            self.grpc_address = await self._start_grpc(self._ctx, cfg.host, cfg.grpc_port)
            self._native = NativeServer(self._ctx)
            await self._native.start(sock)
        except BaseException:
            sock.close()
            await self._teardown()
            raise
        jobs = schedule_for(self.broker)
        if self.acl is not None and self.acl.version == 1:
            log.warning("ACL file %s is in the older format: it loads translated to policies, "
                        "with default_group_perm DENY unless written (docs/acl.md); "
                        "`broker-lite acl check FILE` shows what each account may do",
                        self.acl.path)
        if self.acl is not None and self.acl.path is not None:
            jobs.append(("reload_acl", self.acl.reload_if_changed, ACL_RELOAD_SECONDS))
        self._periodic = [Periodic(name, fn, every) for name, fn, every in jobs]
        for task in self._periodic:
            task.start()
        log.info("broker %r ready: native=%s grpc=%s data_dir=%s flush=%s acl=%s",
                 self.broker_config.broker_name, self.native_address, self.grpc_address,
                 self.broker_config.store.data_dir, self.broker_config.store.flush,
                 "on" if self.acl is not None else "off")

    async def _start_grpc(self, ctx: ServerContext, host: str, port: int | None) -> str:
        if port is None:
            log.info("no gRPC door (grpc_port is None): native door only")
            return "off"
        if missing_extra("rocketmq"):
            raise ConfigurationError(needs_extra("the gRPC door", "rocketmq"),
                                     setting="grpc_port")
        # the door's imports (grpcio, the official client's protobufs), loaded here only
        import grpc

        from broker_lite.grpc_door import GrpcDoor, add_to_server

        # grpc refuses requests over 4 MiB by default: room for the largest body the
        # store takes, plus its envelope (the door answers MESSAGE_BODY_TOO_LARGE itself)
        largest = self.broker_config.store.max_message_size + (1 << 20)
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", largest),
                                          ("grpc.max_send_message_length", -1)])
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = server.add_insecure_port(target)
        except RuntimeError as exc:
            raise OSError(f"cannot bind the gRPC door to {target}: {exc}") from exc
        if not bound:
            raise OSError(f"cannot bind the gRPC door to {target}")
        door = GrpcDoor(ctx, self.grpc_config)
        door.address = (host, bound)
        add_to_server(server, door)
        await server.start()
        door.start()
        self._grpc, self.grpc_door = server, door
        return f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"

    def request_stop(self) -> None:
        """Ask :meth:`wait_stopped` to return; safe from signal handlers and other threads."""
        loop = self._loop
        if loop is None:  # not started: no other thread can know of us yet
            self._stop.set()
            return
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(self._stop.set)

    async def wait_stopped(self) -> None:
        await self._stop.wait()

    async def stop(self) -> None:
        """Graceful shutdown; the broker's state is persisted and its files closed."""
        log.info("shutting down")
        await self._teardown()
        log.info("broker stopped")

    async def _teardown(self) -> None:
        if self._native is not None:
            self._native.stop_accepting()
        if self.grpc_door is not None:
            await self.grpc_door.close()
            self.grpc_door = None
        if self._grpc is not None:
            await self._grpc.stop(None)
            self._grpc = None
        if self._native is not None:
            await self._native.close()
            self._native = None
        if self._periodic:
            await asyncio.gather(*(p.stop() for p in self._periodic), return_exceptions=True)
            self._periodic = []
        if self._ctx is not None and self._ctx.background:
            _, pending = await asyncio.wait(list(self._ctx.background), timeout=_SHUTDOWN_GRACE)
            for task in pending:
                task.cancel()
        if self.broker is not None:
            broker, self.broker = self.broker, None
            await asyncio.to_thread(_close_broker, broker)


def _close_broker(broker: Broker) -> None:
    try:
        broker.persist()
    finally:
        broker.close()


async def serve(broker_config: BrokerConfig, server_config: ServerConfig, *,
                acl: Acl | None = None, ready: Callable[[str], None] = print,
                grpc_config: GrpcDoorConfig | None = None,
                open_broker: Callable[[BrokerConfig], Broker] = Broker) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut it down gracefully.

    ``ready`` receives the ready line once both doors listen; ``open_broker``
    opens the core (see :class:`BrokerRuntime`).
    """
    runtime = BrokerRuntime(broker_config, server_config, acl=acl, grpc_config=grpc_config,
                            open_broker=open_broker)
    loop = asyncio.get_running_loop()
    # Installed before start: a SIGTERM during recovery stops the broker right after.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, runtime.request_stop)
    try:
        await runtime.start()
        ready(runtime.ready_line)
        await runtime.wait_stopped()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await runtime.stop()
