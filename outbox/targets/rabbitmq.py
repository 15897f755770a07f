"""RabbitMQ (AMQP 0-9-1, through aio-pika) as a :class:`~outbox.targets.base.Target`.

RabbitMQ has no transactional half and no check-back, so this target has
nothing to end and nothing to answer (docs/rabbitmq.md has the whole story):

* **The row goes out in** :meth:`RabbitMQTarget.send_halves`: the relay only
  claims rows whose DB transaction committed (the kind's only mode is
  ``outbox``), so each row is published at once, persistent
  (``delivery_mode=2``), with ``mandatory`` set, on a channel with publisher
  confirms. Its :class:`~outbox.targets.base.HalfStored` means *the broker
  confirmed it* (its own ``Basic.Ack``): a quorum queue or a stream confirms
  once a majority of its replicas wrote it. A message no queue takes comes
  back (``NO_ROUTE``) and is the row's ``config`` refusal, never a silent drop.
* **Throughput.** A call publishes on the idlest of up to :data:`CHANNELS`
  confirming channels of one connection, so the relay's lanes publish side by
  side; the rows of a wave are encoded and written as one write on the
  channel (:mod:`outbox.targets.rabbitmq_wave`: no per-row task, lock or
  queue put) and their confirms awaited together, with one deadline
  (``broker_timeout``) for the wave.
* **The mapping:** routing key = the row's ``topic``, on the exchange the
  address names (``?exchange=NAME``; by default the default exchange, where the
  topic is the queue's name); ``message_id`` = ``tx_id`` (also in the
  :data:`~outbox.targets.base.TX_ID_PROPERTY` header); ``type`` = ``tag``; the
  row's headers as headers, with ``rocketbox-keys``, ``rocketbox-group`` and
  ``rocketbox-published-ms`` (the publish time in ms, which the export reads);
  ``app_id`` = the producer group.
* :meth:`RabbitMQTarget.end_transactions` **asks the broker nothing**: the
  message is already there, so every end is :class:`~outbox.targets.base.TxEnded`.
* **Per-group order.** Rows go out in waves: the ``i``-th row of each message
  group in wave ``i``, each wave confirmed before the next. When a row is not
  confirmed, the later rows of its group are not sent (each gets a
  ``transient`` refusal saying so), so a group never overtakes itself.
* **Re-sends.** A relay that dies between the confirm and marking the row
  sends it again: a second message with the same ``message_id``, which the
  inbox (:mod:`outbox.inbox_rabbitmq`) drops.
* **Errors.** A connection that cannot be made or is lost with every row of a
  pass unconfirmed is :class:`~outbox.errors.BrokerUnreachableError` (no row
  at fault); refused credentials, an unknown vhost or exchange, and a topic no
  queue takes are ``config`` refusals; a nack is ``transient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

import aiormq.exceptions as amqp_errors
from aio_pika.abc import AbstractChannel, AbstractConnection
from aiormq import Channel as UnderlayChannel

from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError, ConfigurationError, RowFault, RowRefusedError
from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfStored,
    OutgoingMessage,
    TxEnd,
    TxEnded,
)
from outbox.targets.rabbitmq_amqp import (
    GROUP_HEADER,
    KEYS_HEADER,
    POSITION,
    PUBLISHED_MS_HEADER,
    AmqpSettings,
    amqp_headers,
    amqp_message,
    amqp_properties,
    connect,
    probe,
)
from outbox.targets.rabbitmq_wave import (
    RowTooLarge,
    check_channel,
    forget,
    publish_wave,
    wave_frames,
)

__all__ = ["CHANNELS", "GROUP_HEADER", "KEYS_HEADER", "POSITION", "PUBLISHED_MS_HEADER",
           "AmqpSettings", "RabbitMQTarget", "amqp_headers", "amqp_message", "amqp_properties",
           "connect", "probe"]

log = logging.getLogger("rocketbox.relay")

#: the confirming channels a target publishes on at most: one per pass running at once
#: (the relay's ``drain_lanes``, 3 by default) and one to spare
CHANNELS = 4


class _NotConfirmed:
    """A publish that got no answer (the connection or channel went); not the row's fault.
    A value, never raised: all of a pass's rows so make the pass fail."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class _Channel:
    """One confirming channel of the connection, and how many rows it has in flight."""

    def __init__(self, channel: AbstractChannel, underlay: UnderlayChannel) -> None:
        self.channel = channel
        self.underlay = underlay
        self.in_flight = 0
        #: each topic's ``Basic.Publish`` frame on this channel (rabbitmq_wave.wave_frames)
        self.publish_frames: dict[str, bytes] = {}

    def usable(self) -> bool:
        return not self.channel.is_closed and not self.underlay.is_closed


class RabbitMQTarget:
    """Publishes rows to RabbitMQ with publisher confirms: one connection, a few channels.

    Each :meth:`send_halves` call publishes on one channel, the idlest of up to
    ``channels`` (:data:`CHANNELS`), so passes running at once (the relay's
    lanes) each have their own; every row of a wave is written at once and
    their confirms are awaited together, with one deadline (``broker_timeout``).
    A lost connection is made again by the next call (which, when it was lost,
    calls the :meth:`on_reconnect` callbacks); a closed channel is opened again.
    """

    def __init__(self, outbox: Outbox, *, channels: int = CHANNELS) -> None:
        if channels < 1:
            raise ConfigurationError(f"RabbitMQ target: channels must be >= 1, got {channels}",
                                     setting="channels")
        self.settings = AmqpSettings.of(outbox)
        self.description = f"RabbitMQ at {self.settings.shown}"
        self._connection: AbstractConnection | None = None
        self._channels: list[_Channel | None] = [None] * channels
        self._lock: asyncio.Lock | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._connected_before = False
        #: a publish got no answer: the connection is made again before the next one
        self._broken = False

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    @property
    def open_channels(self) -> int:
        """How many of its channels are open now: one per pass that ran at once with
        another, up to ``channels``."""
        if not self._connected():
            return 0
        return sum(1 for c in self._channels if c is not None and c.usable())

    async def start(self) -> None:
        await self._ready()

    def _idlest(self) -> _Channel | None:
        """An open channel with nothing in flight, else None (when a slot is free), else
        the open channel with the fewest rows in flight."""
        if not self._connected():
            return None
        open_ = [c for c in self._channels if c is not None and c.usable()]
        idle = next((c for c in open_ if c.in_flight == 0), None)
        if idle is not None or len(open_) < len(self._channels):
            return idle
        return min(open_, key=lambda c: c.in_flight)

    def _connected(self) -> bool:
        return (not self._broken and self._connection is not None
                and not self._connection.is_closed)

    async def _ready(self) -> _Channel:
        """A channel to publish on (opened now if need be, the connection too).

        Anything that goes wrong while making them (the connection died under
        us, say) drops the connection and is :class:`BrokerUnreachableError`.
        """
        chosen = self._idlest()
        if chosen is not None:
            return chosen
        if self._lock is None:  # made on the loop that uses it
            self._lock = asyncio.Lock()
        async with self._lock:
            chosen = self._idlest()
            if chosen is not None:
                return chosen
            if self._connection is not None and not self._connected():
                await self._drop()
            try:
                if self._connection is None:
                    self._connection = await connect(self.settings,
                                                     name=f"{self.settings.app_id}-relay")
                    if self._connected_before:
                        for callback in self._callbacks:
                            callback()
                    self._connected_before = True
                slot = next(i for i, c in enumerate(self._channels)
                            if c is None or not c.usable())
                channel = await self._connection.channel(publisher_confirms=True,
                                                         on_return_raises=True)
                underlay = await channel.get_underlay_channel()
                check_channel(underlay)  # aiormq's, as rabbitmq_wave writes on it
                assert isinstance(underlay, UnderlayChannel)
                opened = _Channel(channel, underlay)
                self._channels[slot] = opened
            except (BrokerUnreachableError, ConfigurationError):
                raise
            except Exception as exc:
                await self._drop()
                raise BrokerUnreachableError(f"{self.description} unreachable: "
                                             f"{exc or type(exc).__name__}",
                                             server=self.settings.shown) from exc
            return opened

    async def _drop(self) -> None:
        """Forget the connection (closing it as far as it still can be)."""
        connection, self._connection = self._connection, None
        self._channels = [None] * len(self._channels)
        self._broken = False
        if connection is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), self.settings.timeout)

    async def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        if not messages:
            return []
        try:
            channel = await self._ready()
        except ConfigurationError as exc:  # refused credentials, say: the setup, every row
            return [self._refused(msg.tx_id, exc, RowFault.CONFIG) for msg in messages]
        outcomes: dict[str, HalfOutcome | _NotConfirmed] = {}
        stopped: dict[str, str] = {}  # message group -> the row that stopped it
        for wave in _waves(messages):
            sending = []
            for msg in wave:
                group = msg.message_group
                if group is not None and group in stopped:
                    outcomes[msg.tx_id] = RowRefusedError(
                        f"held back: {stopped[group]}, before it in message group "
                        f"{group!r}, was not confirmed", tx_id=msg.tx_id,
                        kind=RowFault.TRANSIENT, target=self.description)
                else:
                    sending.append(msg)
            if not sending:
                continue
            if not (self._connected() and channel.usable()):  # it went in an earlier wave
                try:
                    channel = await self._ready()
                except (BrokerUnreachableError, ConfigurationError) as exc:
                    for msg in sending:
                        outcomes[msg.tx_id] = _NotConfirmed(str(exc))
                    continue
            channel.in_flight += len(sending)
            try:
                answers = await self._publish_wave(channel, sending)
            finally:
                channel.in_flight -= len(sending)
            for msg, answer in zip(sending, answers, strict=True):
                outcomes[msg.tx_id] = answer
                if not isinstance(answer, HalfStored) and msg.message_group is not None:
                    stopped.setdefault(msg.message_group, msg.tx_id)
        if all(isinstance(outcomes[m.tx_id], _NotConfirmed) for m in messages):
            first = outcomes[messages[0].tx_id]
            raise BrokerUnreachableError(f"{self.description} unreachable: {first}",
                                         server=self.settings.shown)
        return [self._settled(msg.tx_id, outcomes[msg.tx_id]) for msg in messages]

    async def _publish_wave(self, channel: _Channel, wave: Sequence[OutgoingMessage]
                            ) -> list[HalfOutcome | _NotConfirmed]:
        """Publish every row of ``wave`` at once and wait for their confirms together
        (``broker_timeout`` for all): each row's outcome, in order.

        The wave's frames are encoded here and written as one
        (:mod:`outbox.targets.rabbitmq_wave`), so it goes out back to back and the
        broker confirms it as it stores it; a row is :class:`HalfStored` only on its
        own ``Basic.Ack``. A row with a field AMQP cannot carry (a short string over
        255 bytes) is refused alone (``row_invalid``), before anything is written.
        """
        published_ms = time.time_ns() // 1_000_000
        underlay, cache = channel.underlay, channel.publish_frames
        exchange, app_id = self.settings.exchange, self.settings.app_id
        number, max_content = underlay.number, underlay.max_content_size
        answers: list[HalfOutcome | _NotConfirmed | None] = [None] * len(wave)
        frames: list[tuple[str, bytes]] = []
        sending: list[int] = []
        for index, msg in enumerate(wave):
            try:
                frames.append((msg.tx_id, wave_frames(
                    number, exchange, msg, app_id=app_id, published_ms=published_ms,
                    max_content=max_content, publish_frames=cache)))
            except RowTooLarge as exc:
                answers[index] = self._refused(msg.tx_id, exc, RowFault.ROW_INVALID,
                                               f"{exc}: RabbitMQ cannot carry it")
                continue
            sending.append(index)
        if frames:
            try:
                first_tag, futures = await publish_wave(underlay, frames)
            except Exception as exc:  # the channel or connection went: nothing written
                for index in sending:
                    answers[index] = self._failed(wave[index], exc)
                return _all_answered(answers)
            _done, pending = await asyncio.wait(futures, timeout=self.settings.timeout)
            if pending:
                self._broken = True  # a confirm that never came: a new connection next time
                for future in pending:
                    future.cancel()
            forget(underlay, [tx_id for tx_id, _ in frames], first_tag)
            for index, future in zip(sending, futures, strict=True):
                msg = wave[index]
                if future.cancelled():
                    answers[index] = _NotConfirmed(
                        f"no confirm within {self.settings.timeout:g}s")
                    continue
                error = future.exception()
                answers[index] = (HalfStored(msg.tx_id, msg.topic, position=POSITION)
                                  if error is None else self._failed(msg, error))
        return _all_answered(answers)

    def _failed(self, msg: OutgoingMessage, exc: BaseException) -> HalfOutcome | _NotConfirmed:
        """The outcome of a publish that raised ``exc``."""
        if isinstance(exc, amqp_errors.PublishError):  # Basic.Return: no queue takes it
            where = (f"exchange {self.settings.exchange!r}" if self.settings.exchange
                     else "the default exchange (declare a queue named after the topic)")
            return self._refused(msg.tx_id, exc, RowFault.CONFIG,
                                 f"no queue takes routing key {msg.topic!r} on {where}: "
                                 f"{_reply_text(exc)}")
        if isinstance(exc, amqp_errors.DeliveryError):  # Basic.Nack: it could not store it
            return self._refused(msg.tx_id, exc, RowFault.TRANSIENT,
                                 f"the broker nacked it: {exc}")
        if isinstance(exc, amqp_errors.ChannelNotFoundEntity | amqp_errors.ChannelAccessRefused):
            return self._refused(msg.tx_id, exc, RowFault.CONFIG)
        if isinstance(exc, amqp_errors.ChannelPreconditionFailed):  # over its size limit
            return self._refused(msg.tx_id, exc, RowFault.ROW_INVALID)
        if isinstance(exc, amqp_errors.AMQPError | RuntimeError | ConnectionError | OSError
                      | TimeoutError):  # ChannelInvalidStateError is a RuntimeError
            self._broken = True
            return _NotConfirmed(f"no confirm: {exc or type(exc).__name__}")
        raise exc

    def _refused(self, tx_id: str, exc: BaseException, kind: RowFault,
                 text: str | None = None) -> RowRefusedError:
        error = RowRefusedError(text or str(exc), tx_id=tx_id, kind=kind,
                                target=self.description)
        error.__cause__ = exc
        return error

    def _settled(self, tx_id: str, outcome: HalfOutcome | _NotConfirmed) -> HalfOutcome:
        if isinstance(outcome, _NotConfirmed):
            return RowRefusedError(str(outcome), tx_id=tx_id, kind=RowFault.TRANSIENT,
                                   target=self.description)
        return outcome

    async def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        """Nothing to end: each row was published (and confirmed) by :meth:`send_halves`."""
        return [TxEnded(end.tx_id) for end in ends]

    async def close(self) -> None:
        await self._drop()


def _all_answered(answers: list[HalfOutcome | _NotConfirmed | None]
                  ) -> list[HalfOutcome | _NotConfirmed]:
    settled = [a for a in answers if a is not None]
    assert len(settled) == len(answers), "a row of the wave has no outcome"
    return settled


def _reply_text(exc: amqp_errors.PublishError) -> str:
    frame = exc.frame
    return str(getattr(frame, "reply_text", "") or exc)


def _waves(messages: Sequence[OutgoingMessage]) -> list[list[OutgoingMessage]]:
    """Wave ``i``: the ``i``-th row of each message group (every ungrouped row in wave 0)."""
    waves: list[list[OutgoingMessage]] = []
    depth: dict[str, int] = {}
    for msg in messages:
        index = 0
        if msg.message_group is not None:
            index = depth.get(msg.message_group, 0)
            depth[msg.message_group] = index + 1
        while len(waves) <= index:
            waves.append([])
        waves[index].append(msg)
    return waves
