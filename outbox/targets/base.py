"""The seam between the outbox and a broker: a :class:`Target`, and what it answers.

A target publishes the outbox's rows to one kind of broker (broker_lite's
native door in :mod:`outbox.targets.broker_lite`; Apache RocketMQ 5 beside
it). Its methods are coroutines; the relay, the Celery tasks and the
``half_first`` integrations reach it through a :class:`Publisher`, the sync
face :class:`~outbox.targets.runner.TargetPublisher` gives any target.
docs/targets.md is the contract in prose; in short:

* :meth:`Target.send_halves` stores a half for each message and answers one
  outcome per message, in order: :class:`HalfStored` (the ids the target needs
  to end it) or a :class:`~outbox.errors.RowRefusedError` whose ``kind``
  says whether the row is at fault (``row_invalid``), the setup is
  (``config``), or the broker may take it later (``transient``). One row's
  fault never fails the others.
* :meth:`Target.end_transactions` ends each :class:`TxEnd`'s half and answers,
  per end and in order, :class:`TxEnded`, :class:`LeftToCheckback` (the broker
  can no longer end it on request; its check-back will ask the status table),
  or a :class:`~outbox.errors.RowRefusedError`.
* :meth:`PipelinedTarget.send_and_end` (optional; broker_lite's native door):
  each message's half and its end in two requests written back to back, the
  end naming the half by ``tx_id``, with no wait for the halves' answer in
  between: one round trip where the two methods above take two.
* A request that did not get through at all raises
  :class:`~outbox.errors.BrokerUnreachableError`: no row is at fault, so the
  caller counts no attempt and retries the pass later.
* :meth:`Target.start` connects once; a setup that can never work (unknown
  host, refused credentials) raises :class:`~outbox.errors.ConfigurationError`,
  an outage :class:`~outbox.errors.BrokerUnreachableError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import msgspec

from outbox.errors import RowRefusedError

__all__ = ["TX_ID_PROPERTY", "EndOutcome", "HalfOutcome", "HalfStored", "HalfThenEnd",
           "LeftToCheckback", "OutgoingMessage", "PipelinedTarget", "Publisher", "RelayTuning",
           "Target", "TxEnd", "TxEnded", "TxState", "dedupe_key", "relay_tuning", "tx_state"]

#: the user property a target puts the row's ``tx_id`` in, where the broker has no
#: better place for it (RocketMQ 5); the inbox de-duplicates on it
TX_ID_PROPERTY = "ROCKETBOX_TX_ID"



def dedupe_key(message: Any) -> str:
    """What a consumer de-duplicates a delivered ``message`` on: its row's ``tx_id``.

    Every target puts it in the :data:`TX_ID_PROPERTY` property (on RocketMQ
    the message id is the half's UNIQ_KEY, one per half, not per row); a
    message without it (one another producer sent to broker_lite) falls back
    to the broker's own ``dedupe_key`` (broker_lite: the transaction id, which
    the relay makes the ``tx_id``).
    """
    key = message.properties.get(TX_ID_PROPERTY)
    return str(key) if key else str(message.dedupe_key)


#: how a row's transaction ends (``UNKNOWN``: not now, the broker's check-back decides)
TxState = Literal["COMMIT", "ROLLBACK", "UNKNOWN"]


def tx_state(name: str | None) -> TxState:
    """The :data:`TxState` a status row's ``state`` (or a task's argument) names;
    anything but ``COMMIT`` or ``ROLLBACK`` is ``UNKNOWN``."""
    return "COMMIT" if name == "COMMIT" else "ROLLBACK" if name == "ROLLBACK" else "UNKNOWN"


class OutgoingMessage(msgspec.Struct, frozen=True):
    """One row, as a half to send: ``tx_id`` is its key on every target."""

    tx_id: str
    topic: str
    body: bytes
    tag: str | None
    keys: tuple[str, ...]
    message_group: str | None
    properties: dict[str, str]


class HalfStored(msgspec.Struct, frozen=True):
    """A half the broker stored: what ending it needs.

    broker_lite names a half by its offsets (``half_offset`` in the commit
    log, ``queue_offset`` in the half queue); RocketMQ by ``message_id`` and
    ``transaction_id``. A field a target does not use is ``-1`` or ``""``.
    A half known only from its row (a retried pass) has ``queue_offset -1``.
    ``position``: where the broker put the message, in its own words
    (``STREAM:SEQ``), for a target that stores it when sending (no half); the
    relay writes it to the row's ``broker_position`` when it marks it relayed,
    unless the :class:`TxEnded` names one. None: the target does not say.
    """

    tx_id: str
    topic: str
    half_offset: int = -1
    queue_offset: int = -1
    message_id: str = ""
    transaction_id: str = ""
    position: str | None = None


class TxEnd(msgspec.Struct, frozen=True):
    """End ``half``'s transaction with ``state``."""

    half: HalfStored
    state: TxState

    @property
    def tx_id(self) -> str:
        return self.half.tx_id


class TxEnded(msgspec.Struct, frozen=True):
    """The broker ended the transaction; ``commit_offset`` is the committed message's
    commit-log offset (``-1`` for a rollback, or when the target does not say).

    ``position``: where the broker put the committed message, in its own words
    (``STREAM:SEQ`` on JetStream, ``QUEUE:N`` on RabbitMQ; at most 255
    characters), for a target without a commit-log offset; the relay writes it
    to the row's ``broker_position`` when it marks the row relayed (it wins
    over :attr:`HalfStored.position`). None: the target does not say.
    """

    tx_id: str
    commit_offset: int = -1
    position: str | None = None


class LeftToCheckback(msgspec.Struct, frozen=True):
    """The broker can no longer end this half on request (it forgot the transaction);
    its check-back will ask the status table. Not a failure: no attempt is counted."""

    tx_id: str
    reason: str


HalfOutcome = HalfStored | RowRefusedError
EndOutcome = TxEnded | LeftToCheckback | RowRefusedError
#: one row's outcome from :meth:`PipelinedTarget.send_and_end`: its half's, and its end's
#: (None when the half was refused: then no end counts for the row)
HalfThenEnd = tuple[HalfOutcome, EndOutcome | None]


class RelayTuning(msgspec.Struct, frozen=True):
    """A target's own defaults for the relay's settings (None: the library's), for the
    fields the user did not set (:meth:`outbox.config.RelaySettings.tuned`). A target
    declares one as its class attribute ``relay_tuning`` (optional: without it, the
    library's defaults hold), measured on its broker (docs/outbox.md, "Lanes and batch
    size per target")."""

    batch_size: int | None = None
    drain_lanes: int | None = None


def relay_tuning(publisher: object) -> RelayTuning:
    """The :class:`RelayTuning` a publisher's target declares (a publisher that is no
    :class:`~outbox.targets.runner.TargetPublisher` may declare its own); none: an empty
    one."""
    target = getattr(publisher, "target", publisher)
    tuning = getattr(target, "relay_tuning", None)
    return tuning if isinstance(tuning, RelayTuning) else RelayTuning()


class Target(Protocol):
    """One broker the outbox publishes to; every method runs on one event loop."""

    #: names the target in errors and logs (``broker_lite at 127.0.0.1:10911``)
    description: str
    # optional, not a member: ``relay_tuning``, a class attribute (a :class:`RelayTuning`)
    # with the target's own defaults for the relay's batch size and lanes

    async def start(self) -> None:
        """Connect (the first send does it too); see the module doc for what it raises."""
        ...

    async def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        """One outcome per message, in order (module doc)."""
        ...

    async def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        """One outcome per end, in order (module doc)."""
        ...

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (on the loop; it must return at once) whenever the lost
        connection is back; a target without reconnects may never call it."""
        ...

    async def close(self) -> None: ...


class PipelinedTarget(Target, Protocol):
    """A :class:`Target` that can send a pass's halves and their ends in one round trip.

    Only for a broker that handles a connection's requests in order, so each
    half is stored before its end is read, and that can end a half named by
    its ``tx_id`` alone; and only for a target whose halves need nothing
    written on their rows before their end (not RocketMQ 5's, whose ids the
    relay records first, docs/rocketmq.md). The relay uses it for a pass of
    ungrouped rows that have no half yet (docs/outbox.md, "One round trip for
    the halves and their ends").
    """

    async def send_and_end(self, messages: Sequence[OutgoingMessage],
                           states: Sequence[TxState]) -> list[HalfThenEnd] | None:
        """Store a half for each message and end it with its state: one outcome each, in
        order, as :meth:`send_halves` and :meth:`end_transactions` would give; None when
        the target cannot do it for these messages this time (the caller then takes the
        two-step way, which names the row at fault)."""
        ...


class Publisher(Protocol):
    """What the relay, the Celery tasks and ``half_first`` call: a target, from sync code.

    Thread-safe; the same outcomes and errors as :class:`Target`.
    """

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]: ...

    def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]: ...

    def close(self) -> None: ...


def __getattr__(name: str) -> Any:
    """``LeftToCheckBack``, the deprecated old spelling of :class:`LeftToCheckback`."""
    if name == "LeftToCheckBack":
        warnings.warn("LeftToCheckBack is deprecated; use LeftToCheckback",
                      DeprecationWarning, stacklevel=2)
        return LeftToCheckback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
