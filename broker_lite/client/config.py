"""Client settings: one frozen dataclass, passed by keyword. Nothing reads the environment."""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from dataclasses import dataclass
from typing import TypedDict

from broker_lite.errors import ConfigurationError
from broker_lite.protocol import DEFAULT_MAX_FRAME_SIZE

__all__ = [
    "DEFAULT_SERVER",
    "ClientConfig",
    "ConnectionOptions",
    "build_config",
    "check_group",
    "make_client_id",
    "parse_server",
]

#: where ``broker-lite serve`` listens when no ``--port`` is given
DEFAULT_SERVER = "127.0.0.1:10911"


def parse_server(server: str) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6]:port"``) as ``(host, port)``; ValueError naming the field."""
    host, sep, port_text = server.strip().rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ConfigurationError(f"server must be HOST:PORT, got {server!r}", setting="server")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ConfigurationError(f"server port must be in [1, 65535], got {port}", setting="server")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def check_group(group: str) -> str:
    """A producer or consumer group name; ValueError naming the rule."""
    if not isinstance(group, str) or not group or group.startswith("%"):
        raise ConfigurationError(
            f"group must be a non-empty name not starting with '%', got {group!r}", setting="group")
    return group


def make_client_id() -> str:
    """A client id unique across hosts, processes and clients: ``host@pid@random``."""
    return f"{socket.gethostname()}@{os.getpid()}@{uuid.uuid4().hex[:12]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """How a client reaches the broker and how patient it is."""

    server: str = DEFAULT_SERVER
    #: empty: :func:`make_client_id` picks one
    client_id: str = ""
    #: credentials for a broker run with ``--acl``; both or neither
    access_key: str | None = None
    secret_key: str | None = None
    #: default per-request deadline (seconds), waiting for a connection included
    request_timeout: float = 5.0
    connect_timeout: float = 3.0
    heartbeat_interval: float = 10.0
    #: reconnect backoff: doubles from ``min`` up to ``max``, with jitter
    reconnect_min_delay: float = 0.05
    reconnect_max_delay: float = 5.0
    #: largest frame this client sends or accepts (the broker may lower it)
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE

    def __post_init__(self) -> None:
        parse_server(self.server)
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigurationError("access_key and secret_key go together: give both or neither",
                                     setting="access_key, secret_key")
        for name in ("request_timeout", "connect_timeout", "heartbeat_interval",
                     "reconnect_min_delay", "reconnect_max_delay"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigurationError(f"{name} must be positive, got {value!r}", setting=name)
        if self.reconnect_max_delay < self.reconnect_min_delay:
            raise ConfigurationError("reconnect_max_delay must be >= reconnect_min_delay",
                                     setting="reconnect_max_delay")
        if self.max_frame_size < 1024:
            raise ConfigurationError(
                f"max_frame_size must be at least 1024, got {self.max_frame_size}",
                setting="max_frame_size")

    @property
    def address(self) -> tuple[str, int]:
        return parse_server(self.server)


class ConnectionOptions(TypedDict, total=False):
    """The keywords every client constructor takes to reach the broker (all optional).

    ``config`` is the base; the others override its fields: ``timeout`` sets
    ``request_timeout``, and ``access_key`` / ``secret_key`` go together.
    """

    access_key: str | None
    secret_key: str | None
    timeout: float | None
    client_id: str | None
    config: ClientConfig | None


def build_config(
    server: str | None,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    timeout: float | None = None,
    client_id: str | None = None,
    config: ClientConfig | None = None,
) -> ClientConfig:
    """The config a client constructor was given: ``config``, with the keyword overrides.

    Constructors pass their :class:`ConnectionOptions` on as ``**options``;
    a keyword this signature does not name raises ``TypeError`` here.
    """
    base = config or ClientConfig()
    changes: dict[str, object] = {}
    if server is not None:
        changes["server"] = server
    if access_key is not None or secret_key is not None:
        changes["access_key"] = access_key
        changes["secret_key"] = secret_key
    if timeout is not None:
        changes["request_timeout"] = timeout
    if client_id is not None:
        changes["client_id"] = client_id
    return dataclasses.replace(base, **changes) if changes else base  # type: ignore[arg-type]
