"""NATS JetStream as a :class:`~outbox.targets.base.Target` (``nats://HOST:PORT[,...]``).

JetStream has no half message and no check-back, so this target publishes
committed rows only (``Outbox(mode="outbox")``; the kind lists no other
mode) and its two steps are:

* :meth:`NatsTarget.send_halves` **publishes** each row and waits for the
  stream's ack. The message carries ``Nats-Msg-Id: <tx_id>``, so the stream
  drops a re-sent row inside its duplicate window (the ack then says
  ``duplicate``, which is still a success: the message is in the stream),
  and ``Nats-Expected-Stream``, so a row never lands in another stream than
  the one checked for its topic. The answer is a
  :class:`~outbox.targets.base.HalfStored` with ``queue_offset`` = the
  stream sequence, ``transaction_id`` = the stream's name and ``position``
  = ``STREAM:SEQ``, which the relay writes to the row's ``broker_position``).
* :meth:`NatsTarget.end_transactions` makes **no broker call**: a published
  row's end is :class:`~outbox.targets.base.TxEnded`, and the relay marks
  the row relayed.

Order per message group: the rows of one group are published one after
another, each after the previous one's ack, and after a failure the rest of
that group in the request is not published (its
:class:`~outbox.targets.base.HalfStored` has ``queue_offset -1``, and the
relay holds those rows back behind the failed one, no attempt counted).
Different groups and ungrouped rows are published at once: a batch's
``HPUB`` commands are encoded here and written to the connection as one
(:mod:`outbox.targets.nats_wire`: a topic's subject and stream header made
once, each row's headers encoded once, no nats-py ``publish`` per row), and
each row's ack comes back on its own reply subject
(:mod:`outbox.targets.nats_acks`). A row refused before it is sent (a
header or ``tx_id`` that cannot be a NATS header, a message over the
server's ``max_payload``) is refused alone, ``row_invalid``, naming it.

Before the first row of a topic, the target finds the topic's stream and
checks it (:mod:`outbox.targets.nats_stream`): a duplicate window shorter
than the relay's longest retry refuses the topic's rows (``config``, naming
``duplicate_window``), re-checked on every pass until fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from outbox.config import Outbox
from outbox.errors import BrokerUnreachableError, ConfigurationError, RowFault, RowRefusedError
from outbox.targets.base import (
    EndOutcome,
    HalfOutcome,
    HalfStored,
    OutgoingMessage,
    RelayTuning,
    TxEnd,
    TxEnded,
)
from outbox.targets.nats_acks import Acked, AckInbox, AckReadingClient
from outbox.targets.nats_stream import StreamFacts, stream_problem, subject_for
from outbox.targets.nats_wire import (
    EXPECTED_STREAM_HEADER,
    GROUP_HEADER,
    KEYS_HEADER,
    MSG_ID_HEADER,
    TAG_HEADER,
    TopicWire,
    check_client,
    header_problem,
    hpub,
    row_head,
    topic_wire,
    tx_id_problem,
    write_commands,
)

__all__ = ["EXPECTED_STREAM_HEADER", "GROUP_HEADER", "KEYS_HEADER", "MSG_ID_HEADER",
           "RECONNECT_WAIT", "TAG_HEADER", "NatsTarget", "connect", "headers_for", "position_of",
           "server_urls"]

log = logging.getLogger("rocketbox.relay")

#: the client retries a lost connection this often (seconds)
RECONNECT_WAIT = 0.5
#: errors that say the request did not get through (no row is at fault)
_UNREACHABLE = (nats.errors.TimeoutError, nats.errors.ConnectionClosedError,
                nats.errors.ConnectionReconnectingError, nats.errors.ConnectionDrainingError,
                nats.errors.NoServersError, nats.errors.OutboundBufferLimitError,
                nats.errors.StaleConnectionError, TimeoutError, OSError)


def server_urls(outbox: Outbox) -> list[str]:
    """``nats://[USER:PASS@]HOST:PORT`` (``tls://`` with TLS) of each endpoint, in the
    order given: for connecting only (they hold the address's password)."""
    address = outbox.target_address
    scheme = "tls" if address.tls else "nats"
    userinfo = f"{address.userinfo}@" if address.userinfo else ""
    return [f"{scheme}://{userinfo}{endpoint}" for endpoint in address.endpoint_strings()]


async def connect(outbox: Outbox, *, name: str,
                  reconnected: Callable[[], None] | None = None) -> Client:
    """A connection to ``outbox.broker`` (``access_key``/``secret_key`` as user/password).

    Raises :class:`~outbox.errors.ConfigurationError` for refused credentials or a TLS
    certificate the machine does not trust (nats-py's default context: the system's
    CAs, or ``SSL_CERT_FILE``), :class:`~outbox.errors.BrokerUnreachableError` when no
    server answers within ``broker_timeout``.
    """
    timeout = outbox.relay.broker_timeout

    seen: list[Exception] = []

    async def on_reconnect() -> None:
        if reconnected is not None:
            reconnected()

    async def on_error(exc: Exception) -> None:
        seen.append(exc)
        log.debug("NATS connection: %s", exc)

    # floats where nats-py's hints say int: it takes seconds as floats
    options: dict[str, Any] = {"connect_timeout": min(3.0, timeout),
                               "reconnect_time_wait": RECONNECT_WAIT}
    if outbox.access_key:
        options.update(user=outbox.access_key, password=outbox.secret_key or "")
    client = AckReadingClient()  # nats-py's, with the acks read straight (nats_acks)
    try:
        # nats-py retries a first connect for ever when reconnects are unlimited: the
        # first one gets broker_timeout, later ones are the client's own business
        await asyncio.wait_for(client.connect(
            servers=server_urls(outbox), name=name, allow_reconnect=True,
            max_reconnect_attempts=-1, reconnected_cb=on_reconnect, error_cb=on_error,
            **options), timeout)
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), 2.0)
        refused = next((e for e in [exc, *seen] if "authorization" in str(e).lower()), None)
        if refused is not None:
            raise ConfigurationError(f"{outbox.broker_display} refused the credentials "
                                     f"(access_key/secret_key): {refused}",
                                     setting="access_key") from exc
        untrusted = next((e for e in [exc, *seen]
                          if isinstance(e, ssl.SSLCertVerificationError)), None)
        if untrusted is not None:
            raise ConfigurationError(
                f"{outbox.broker_display}: the server's TLS certificate is not trusted "
                f"({untrusted}); trust its CA (the system's store, or SSL_CERT_FILE)",
                setting="broker") from exc
        last = seen[-1] if seen else exc
        raise BrokerUnreachableError(f"NATS at {outbox.broker_display} unreachable: "
                                     f"{_text(last)}") from exc
    return client


def headers_for(msg: OutgoingMessage, target: str = "NATS") -> dict[str, str] | RowRefusedError:
    """The NATS headers of ``msg``: its properties, tag, keys, group and ``Nats-Msg-Id``
    (what :func:`~outbox.targets.nats_wire.row_head` encodes, before the stream's).

    A property JetStream would read as its own (``Nats-*``) or that cannot be
    a header (a name that is not a token, a line break), and a ``tx_id`` that
    is not one clean line, refuse the row, naming it.
    """
    headers: dict[str, str] = {}
    for name, value in msg.properties.items():
        problem = header_problem(name, value)
        if problem is not None:
            return _invalid(msg, target, problem)
        headers[name] = value
    if msg.tag:
        headers[TAG_HEADER] = msg.tag
    if msg.keys:
        headers[KEYS_HEADER] = " ".join(msg.keys)
    if msg.message_group:
        headers[GROUP_HEADER] = msg.message_group
    problem = tx_id_problem(msg.tx_id)
    if problem is not None:
        return _invalid(msg, target, problem)
    headers[MSG_ID_HEADER] = msg.tx_id
    return headers


def _invalid(msg: OutgoingMessage, target: str, problem: str) -> RowRefusedError:
    return RowRefusedError(problem, tx_id=msg.tx_id, kind=RowFault.ROW_INVALID, target=target)


def position_of(half: HalfStored) -> str | None:
    """``STREAM:SEQ`` of a row this target published, or None (not published)."""
    if half.queue_offset < 0 or not half.transaction_id:
        return None
    return f"{half.transaction_id}:{half.queue_offset}"


class NatsTarget:
    """One NATS connection; each row published with its ack awaited (module doc)."""

    #: the relay's defaults for this target, where the user set none (docs/nats.md,
    #: "Lanes and batch size"): a lane waits on its acks between its claim and its
    #: mark, so more lanes and bigger batches keep the database and the stream busy
    relay_tuning = RelayTuning(batch_size=1000, drain_lanes=6)

    def __init__(self, outbox: Outbox) -> None:
        self.description = f"NATS JetStream at {outbox.broker_display}"
        self._outbox = outbox
        self._timeout = outbox.relay.broker_timeout
        self._client: Client | None = None
        self._js: JetStreamContext | None = None
        self._callbacks: list[Callable[[], None]] = []
        #: topic -> its checked stream
        self._streams: dict[str, str] = {}
        #: topic -> what its rows share on the wire (made from its checked stream)
        self._wires: dict[str, TopicWire] = {}
        self._warned: set[str] = set()
        self._starting = asyncio.Lock()
        self._acks = AckInbox()

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def _reconnected(self) -> None:
        log.info("%s: connection back", self.description)
        for callback in self._callbacks:
            callback()

    async def start(self) -> None:
        async with self._starting:
            if self._client is None:
                client = await connect(
                    self._outbox, name=f"{self._outbox.producer_group}-relay",
                    reconnected=self._reconnected)
                try:
                    check_client(client)
                except ConfigurationError:
                    await client.close()
                    raise
                self._client = client
                self._js = self._client.jetstream(timeout=self._timeout)
                self._acks = AckInbox()
                await self._acks.start(self._client)

    async def close(self) -> None:
        client, self._client, self._js = self._client, None, None
        if client is not None and not client.is_closed:
            await client.close()

    async def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            await self.start()
        assert self._js is not None
        return self._js

    # -- publishing --------------------------------------------------------------------

    async def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        js = await self._jetstream()
        refused = await self._check_streams(js, messages)
        outcomes: list[HalfOutcome | None] = [None] * len(messages)
        loose: list[int] = []  # rows without a message group: published all at once
        groups: dict[str, list[int]] = {}  # a group's rows: one after another
        for index, msg in enumerate(messages):
            if refused and msg.topic in refused:
                outcomes[index] = self._refused(msg.tx_id, refused[msg.topic], RowFault.CONFIG)
            elif msg.message_group:
                groups.setdefault(msg.message_group, []).append(index)
            else:
                loose.append(index)
        unreachable: list[BaseException] = []
        client = self._client
        assert client is not None
        held = await self._publish_all(client, messages, loose, groups, outcomes, unreachable)
        if unreachable and len(unreachable) == len(loose) + len(groups) \
                == len(messages) - held:
            # every publish went unanswered, and nothing else happened: no row is at fault
            raise BrokerUnreachableError(f"{self.description} unreachable: "
                                         f"{_text(unreachable[0])}") from unreachable[0]
        assert all(outcome is not None for outcome in outcomes)
        return outcomes  # type: ignore[return-value]  # each one filled (checked above)

    async def _publish_all(self, client: Client, messages: Sequence[OutgoingMessage],
                           loose: list[int], groups: dict[str, list[int]],
                           outcomes: list[HalfOutcome | None],
                           unreachable: list[BaseException]) -> int:
        """Publish the ``loose`` rows at once beside each group's chain; how many rows
        were held back behind a failure in their group."""
        if not groups:
            await self._publish_batch(client, messages, loose, outcomes, unreachable)
            return 0

        async def publish_loose() -> int:
            await self._publish_batch(client, messages, loose, outcomes, unreachable)
            return 0

        held = await asyncio.gather(
            publish_loose(), *(self._publish_chain(client, messages, chain, outcomes,
                                                   unreachable) for chain in groups.values()))
        return sum(held)

    async def _publish_chain(self, client: Client, messages: Sequence[OutgoingMessage],
                             chain: list[int], outcomes: list[HalfOutcome | None],
                             unreachable: list[BaseException]) -> int:
        """Publish the rows at ``chain`` (one message group) in order, each after the
        previous one's ack; after a failure the rest is not published (held back by the
        relay behind it): how many were held."""
        for position, index in enumerate(chain):
            await self._publish_batch(client, messages, [index], outcomes, unreachable)
            if isinstance(outcomes[index], RowRefusedError):
                rest = chain[position + 1:]
                for later in rest:
                    outcomes[later] = HalfStored(messages[later].tx_id, messages[later].topic)
                return len(rest)
        return 0

    def _wire(self, topic: str) -> TopicWire:
        """What ``topic``'s rows share on the wire, made once per checked stream."""
        wire = self._wires.get(topic)
        if wire is None:
            wire = topic_wire(topic, self._streams.get(topic))
            if topic in self._streams:  # a topic not checked (now) is not remembered
                self._wires[topic] = wire
        return wire

    async def _publish_batch(self, client: Client, messages: Sequence[OutgoingMessage],
                             batch: list[int], outcomes: list[HalfOutcome | None],
                             unreachable: list[BaseException]) -> None:
        """Publish the rows at ``batch`` all at once (one write: :mod:`.nats_wire`), each
        with its own reply subject, then wait for their acks with one deadline
        (``broker_timeout``): each row's outcome is the answer to its own publish
        (:mod:`outbox.targets.nats_acks`). A row refused before it is sent (a header, its
        topic, its size) is refused alone."""
        if not batch:
            return
        acks, wires = self._acks, self._wires
        number, reply_to, slots = acks.open(len(batch))
        try:
            commands: list[bytes] = []
            sent: list[int] = []  # slots of the rows in ``commands``
            limit = client.max_payload
            for slot, index in enumerate(batch):
                msg = messages[index]
                wire = wires.get(msg.topic) or self._wire(msg.topic)
                head = row_head(msg, wire.tail) if wire.problem is None else wire.problem
                if isinstance(head, str):
                    outcomes[index] = _invalid(msg, self.description, head)
                    slots.fill(slot, None)
                    continue
                body = msg.body
                if len(head) + len(body) > limit:
                    outcomes[index] = _invalid(
                        msg, self.description,
                        f"body: {len(body)} bytes and {len(head)} of headers, over the "
                        f"server's max_payload of {limit} bytes")
                    slots.fill(slot, None)
                    continue
                subject = (wire.subject if not msg.message_group
                           else subject_for(msg.topic, msg.message_group).encode())
                commands.append(hpub(subject, b"%b%d" % (reply_to, slot), head, body))
                sent.append(slot)
            try:
                await write_commands(client, commands)
            except Exception as exc:  # nothing of the batch went out
                for slot in sent:
                    index = batch[slot]
                    outcomes[index] = self._failed(messages[index], exc, unreachable)
                    slots.fill(slot, None)
            if slots.left:
                await asyncio.wait([slots.done], timeout=self._timeout)
        finally:
            acks.close(number)
        skipped, replies, acked = slots.skipped, slots.slots, AckInbox.acked
        for slot, index in enumerate(batch):
            if slot in skipped:
                continue
            reply = replies[slot]
            answer = acked(reply)
            if answer is None:
                outcome = AckInbox.outcome(reply)
                if not isinstance(outcome, Acked):
                    outcomes[index] = self._failed(messages[index], outcome, unreachable)
                    continue
                answer = outcome
            msg = messages[index]
            if answer.duplicate:
                log.debug("%s: already in stream %s at %d (a re-send)", msg.tx_id,
                          answer.stream, answer.seq)
            outcomes[index] = HalfStored(msg.tx_id, msg.topic, queue_offset=answer.seq,
                                         transaction_id=answer.stream,
                                         position=f"{answer.stream}:{answer.seq}")

    def _failed(self, msg: OutgoingMessage, exc: BaseException | None,
                unreachable: list[BaseException]) -> RowRefusedError:
        """The row's refusal for what its publish raised (an unanswered one is noted)."""
        try:
            raise exc or nats.errors.TimeoutError()
        except nats.js.errors.NoStreamResponseError as exc:
            self._forget(msg.topic)  # the stream went away: find it again
            return self._refused(msg.tx_id, f"no JetStream stream takes subject "
                                 f"{subject_for(msg.topic, msg.message_group)!r}",
                                 RowFault.CONFIG, exc)
        except nats.js.errors.APIError as exc:
            if exc.err_code == 10060:  # the subject is not in the stream checked for it
                self._forget(msg.topic)
            return self._refused(msg.tx_id, _text(exc), _api_fault(exc), exc)
        except _UNREACHABLE as exc:
            unreachable.append(exc)
            return self._refused(msg.tx_id, f"no ack: {_text(exc)}", RowFault.TRANSIENT, exc)
        except Exception as exc:
            return self._refused(msg.tx_id, _text(exc), RowFault.TRANSIENT, exc)

    def _forget(self, topic: str) -> None:
        """Check ``topic``'s stream again before its next row."""
        self._streams.pop(topic, None)
        self._wires.pop(topic, None)

    def _refused(self, tx_id: str, text: str, kind: RowFault,
                 cause: BaseException | None = None) -> RowRefusedError:
        error = RowRefusedError(text, tx_id=tx_id, kind=kind, target=self.description)
        error.__cause__ = cause
        return error

    async def _check_streams(self, js: JetStreamContext,
                             messages: Sequence[OutgoingMessage]) -> dict[str, str]:
        """Find and check the stream of each topic not checked yet: topic -> why not."""
        first: dict[str, OutgoingMessage] = {}
        for msg in messages:
            if msg.topic not in self._streams:
                first.setdefault(msg.topic, msg)
        refused: dict[str, str] = {}
        for topic, msg in first.items():
            problem = await self._check_stream(js, topic,
                                               subject_for(topic, msg.message_group))
            if problem is not None:
                refused[topic] = problem
        return refused

    async def _check_stream(self, js: JetStreamContext, topic: str,
                            subject: str) -> str | None:
        try:
            name = await js.find_stream_name_by_subject(subject)
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            return (f"no JetStream stream takes subject {subject!r} (topic {topic!r}): "
                    f"create one binding {topic!r} and '{topic}.>' (docs/nats.md)")
        except nats.js.errors.ServiceUnavailableError as exc:
            return f"JetStream is not enabled on {self._outbox.broker_display}: {_text(exc)}"
        except _UNREACHABLE as exc:
            raise BrokerUnreachableError(f"{self.description} unreachable: "
                                         f"{_text(exc)}") from exc
        config = info.config
        facts = StreamFacts(name, float(config.duplicate_window or 0.0),
                            str(getattr(config.storage, "value", config.storage) or "file"))
        problem = stream_problem(facts, self._outbox.relay)
        if problem is not None:
            if problem not in self._warned:
                self._warned.add(problem)
                log.error("%s: not relaying topic %r: %s", self.description, topic, problem)
            return problem
        if facts.storage != "file" and name not in self._warned:
            self._warned.add(name)
            log.warning("%s: stream %r keeps its messages in memory: a server restart loses "
                        "them (create it with storage=file; docs/nats.md)",
                        self.description, name)
        self._streams[topic] = name
        self._wires.pop(topic, None)
        return None

    # -- ending: nothing to ask the broker ------------------------------------------------

    async def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        outcomes: list[EndOutcome] = []
        for end in ends:
            half = end.half  # its position, as send_halves wrote it (or as a row had it)
            position = half.position if half.queue_offset >= 0 and half.transaction_id \
                else None
            position = position or position_of(half)
            if position is None:
                # The relay asks no end of a row held back behind its group's failure; a
                # row it sent no message for at all had a half_offset recorded (never by
                # this target's passes): only re-sending its body can relay it.
                outcomes.append(RowRefusedError(
                    "no NATS message was published for this row in this pass (its "
                    "half_offset is recorded, so the relay sent it no body): set its "
                    "half_offset to NULL and replay it", tx_id=end.tx_id,
                    kind=RowFault.CONFIG, target=self.description))
                continue
            if end.state != "COMMIT":
                log.error("%s: row state is %s but its message is in stream %s: JetStream has "
                          "no half to roll back (publish committed rows only)", end.tx_id,
                          end.state, position, extra={"tx_id": end.tx_id})
            outcomes.append(TxEnded(half.tx_id, position=position))
        return outcomes


def _api_fault(exc: nats.js.errors.APIError) -> RowFault:
    if exc.err_code == 10060:
        return RowFault.CONFIG
    if exc.code is not None and 400 <= exc.code < 500:
        return RowFault.ROW_INVALID
    return RowFault.TRANSIENT


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
