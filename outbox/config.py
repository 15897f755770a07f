"""Configuration: the :class:`Outbox` object and the relay's settings (frozen dataclasses).

The library never reads ``os.environ``; the edges (CLI, Django settings,
Flask config, Celery app factory) build these objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from outbox.errors import ConfigurationError
from outbox.serializers import JsonSerializer, Serializer
from outbox.targets.address import BrokerAddress, parse_broker_address, redacted_address
from outbox.validation import DEFAULT_MAX_BODY_SIZE

__all__ = ["LibraryDefault", "Mode", "Outbox", "RelaySettings"]

Mode = Literal["outbox", "half_first"]


class LibraryDefault(int):
    """A setting the user did not set: the library's default, which a target may replace
    with its own (:meth:`RelaySettings.tuned`). A value the user passes, even the same
    number, is a plain ``int`` and always wins. It is an ``int`` everywhere (compares,
    prints, pickles as one) except to encoders that check the exact type (msgspec):
    give those ``int(value)``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return int.__repr__(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RelaySettings:
    """How the relay claims and retries rows."""

    #: rows claimed per pass (unset: 200, or the target's own default, docs/outbox.md)
    batch_size: int = LibraryDefault(200)
    #: passes a drain (the sweeper) runs at once, each claiming its own rows, so one
    #: pass's database work overlaps another's broker requests (SQLite: always 1;
    #: unset: 3, or the target's own default)
    drain_lanes: int = LibraryDefault(3)
    #: a claim expires after this long, so a dead worker's rows are taken over
    lease_seconds: float = 30.0
    #: after this many failed attempts a row is parked until replayed
    max_attempts: int = 10
    #: retry n waits ``min(backoff_max, backoff_base * 2**n)``, +- ``jitter`` of it
    backoff_base: float = 0.5
    backoff_max: float = 300.0
    jitter: float = 0.2
    #: half-first rows: the relay backs up a lost end-transaction after this long (seconds)
    sweep_after: float = 5.0
    #: how long a broker request may take before the pass gives up (seconds)
    broker_timeout: float = 10.0

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.lease_seconds <= 0 or self.max_attempts < 1:
            raise ConfigurationError(
                "relay settings: batch_size >= 1, lease_seconds > 0 and max_attempts >= 1",
                setting="batch_size, lease_seconds, max_attempts")
        if self.drain_lanes < 1:
            raise ConfigurationError(f"relay settings: drain_lanes must be >= 1, got "
                                     f"{self.drain_lanes}", setting="drain_lanes")
        if not 0 <= self.jitter < 1:
            raise ConfigurationError(f"relay settings: jitter must be in [0, 1), got "
                                     f"{self.jitter}", setting="jitter")

    def tuned(self, *, batch_size: int | None = None,
              drain_lanes: int | None = None) -> RelaySettings:
        """These settings with a target's own defaults (None: it has none) in the fields
        the user did not set; a field the user set keeps the user's value."""
        changes = {name: LibraryDefault(value) for name, value in
                   (("batch_size", batch_size), ("drain_lanes", drain_lanes))
                   if value is not None and isinstance(getattr(self, name), LibraryDefault)}
        return replace(self, **changes) if changes else self


@dataclass(frozen=True, slots=True, kw_only=True)
class Outbox:
    """Everything the outbox needs: where rows live, where messages go, how to relay.

    ``on_commit`` is called with the ``tx_id`` s a committed transaction
    published (the Celery integration enqueues a relay task there). It must
    not raise into the caller's commit: failures are logged and the sweeper
    relays those rows later.
    """

    engine: Engine
    #: ``HOST:PORT`` (broker_lite, the default), ``broker-lite://HOST:PORT``, or
    #: ``rocketmq://HOST:PORT[,HOST:PORT...]`` (RocketMQ 5 proxies; ``rocketmqs://``: TLS);
    #: see :mod:`outbox.targets.address`. Stored normalized (broker_lite's as ``HOST:PORT``).
    #: A password in it is only used to connect: show :attr:`broker_display`.
    broker: str = "127.0.0.1:10911"
    producer_group: str = "rocketbox"
    serializer: Serializer = field(default_factory=JsonSerializer)
    relay: RelaySettings = field(default_factory=RelaySettings)
    mode: Mode = "outbox"
    #: a half whose DB transaction left no row is rolled back after this long
    #: (where the DB cannot say whether that transaction is still running)
    local_tx_timeout: float = 60.0
    on_commit: Callable[[Sequence[str]], None] | None = None
    access_key: str | None = None
    secret_key: str | None = None
    #: the largest body ``publish()`` accepts, in bytes after serialization: set it to the
    #: broker's ``--max-message-size`` (default: broker_lite's default, 4 MiB)
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    #: RocketMQ 5: for this long (seconds) after the proxy took a half's COMMIT end, a
    #: check-back of that half is answered ROLLBACK, because RocketMQ may not have written
    #: the op record closing it yet and a COMMIT would be a second message
    #: (docs/rocketmq.md, "Late check-backs")
    handoff_window: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "broker", str(parse_broker_address(self.broker)))
        self.target_address.check_mode(self.mode)  # the target says which modes it takes
        if not self.producer_group:
            raise ConfigurationError("producer_group must not be empty", setting="producer_group")
        if self.max_body_size < 1:
            raise ConfigurationError(f"max_body_size must be >= 1 byte, got {self.max_body_size}",
                                     setting="max_body_size")
        if self.handoff_window < 0:
            raise ConfigurationError(f"handoff_window must be >= 0 seconds, got "
                                     f"{self.handoff_window}", setting="handoff_window")
        if self.mode not in ("outbox", "half_first"):
            raise ConfigurationError(f"mode must be 'outbox' or 'half_first', not {self.mode!r}",
                                     setting="mode")

    @property
    def broker_display(self) -> str:
        """:attr:`broker` with its password redacted: what output, logs, errors and the
        ``rocketbox_broker_state`` table show (:func:`~outbox.targets.address.redacted_address`)."""
        return redacted_address(self.broker)

    def __repr__(self) -> str:
        return (f"Outbox(engine={self.engine!r}, broker={self.broker_display!r}, "
                f"producer_group={self.producer_group!r}, mode={self.mode!r}, "
                f"access_key={self.access_key!r}, "
                f"secret_key={'***' if self.secret_key else None!r})")

    @property
    def target_address(self) -> BrokerAddress:
        """The parsed :attr:`broker`: which kind of broker, its endpoints, TLS."""
        return parse_broker_address(self.broker)

    def sessionmaker(self) -> sessionmaker[Session]:
        return sessionmaker(self.engine)
