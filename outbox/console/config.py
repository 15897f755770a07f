"""The console's settings: one frozen dataclass, filled by ``rocketbox console`` or
``broker-lite serve --console-port`` (the edges that read the command line)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from outbox.errors import ConfigurationError

__all__ = ["ConsoleConfig", "ConsoleConfigError", "is_loopback"]


class ConsoleConfigError(ConfigurationError):
    """A setting the console cannot run with (named in the message)."""


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` or ``localhost``; anything else is reachable from outside."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleConfig:
    """Where the console reads from, where it listens, and who may use it.

    ``db_url`` may be ``None`` (a broker alone: the outbox pages say so).
    Off loopback, ``token`` or the ACL key pair must be set: each request then
    has to carry them (HTTP Basic with any user name and the token as the
    password, or the access key and secret key as user name and password, or
    ``Authorization: Bearer TOKEN``), or it gets 401.
    """

    broker: str
    db_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    #: seconds between two samples of the overview's numbers (one set of queries each,
    #: however many browsers watch)
    sample_seconds: float = 5.0
    #: samples kept for the charts
    history: int = 360
    #: the last ``rocketbox audit --json`` / ``--html`` / ``--out`` outputs
    audit_json: Path | None = None
    audit_html: Path | None = None
    audit_out: Path | None = None
    #: the producer group the outbox publishes as (its halves are the outbox's)
    producer_group: str = "rocketbox"
    #: host names the ``Host`` header may carry besides the bound address and localhost
    allowed_hosts: tuple[str, ...] = ()
    #: (name, SQLAlchemy URL) of other databases holding inbox rows, for the trace
    inbox_dbs: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConsoleConfigError(f"port must be 0..65535, got {self.port}", setting="port")
        if self.sample_seconds <= 0:
            raise ConsoleConfigError(
                f"sample_seconds must be positive, got {self.sample_seconds}",
                setting="sample_seconds")
        if self.history < 2:
            raise ConsoleConfigError(f"history must be at least 2 samples, got {self.history}",
                                     setting="history")
        for name in self.allowed_hosts:
            if not name or any(c in name for c in "/ @?#"):
                raise ConsoleConfigError(f"allowed host {name!r} is not a host name",
                                         setting="allowed_hosts")
        names = [name for name, _url in self.inbox_dbs]
        for name, url in self.inbox_dbs:
            if not name or not url or names.count(name) > 1:
                raise ConsoleConfigError(
                    f"inbox database {name!r}: give each a unique NAME and a URL (NAME=URL)",
                    setting="inbox_dbs")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConsoleConfigError("access_key and secret_key go together: give both or "
                                     "neither", setting="access_key, secret_key")
        if not is_loopback(self.host) and not self.has_credentials:
            raise ConsoleConfigError(
                f"host {self.host!r} is not loopback: the console needs credentials there "
                "(--token, or --access-key and --secret-key); it would let anyone replay "
                "rows and reset offsets", setting="host")

    @property
    def has_credentials(self) -> bool:
        return bool(self.token) or bool(self.access_key and self.secret_key)
