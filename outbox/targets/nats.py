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
Different groups and ungrouped rows are published at once.

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
from outbox.targets.nats_acks import Acked, AckInbox
from outbox.targets.nats_stream import StreamFacts, stream_problem, subject_for

__all__ = ["EXPECTED_STREAM_HEADER", "GROUP_HEADER", "KEYS_HEADER", "MSG_ID_HEADER",
           "RECONNECT_WAIT", "TAG_HEADER", "NatsTarget", "connect", "headers_for", "position_of",
           "server_urls"]

log = logging.getLogger("rocketbox.relay")

#: JetStream's de-duplication header: the row's ``tx_id``
MSG_ID_HEADER = "Nats-Msg-Id"
#: the row's tag, keys (space-separated) and message group, as it wrote them
TAG_HEADER = "Rocketbox-Tag"
KEYS_HEADER = "Rocketbox-Keys"
GROUP_HEADER = "Rocketbox-Message-Group"
#: the stream checked for the row's topic: JetStream refuses the row if another takes it
EXPECTED_STREAM_HEADER = "Nats-Expected-Stream"
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
    client = Client()
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
    """The NATS headers of ``msg``: its properties, tag, keys, group and ``Nats-Msg-Id``.

    A property JetStream would read as its own (``Nats-*``) or that cannot be
    a header (a name with ``:`` or a space, a line break) refuses the row,
    naming it.
    """
    headers: dict[str, str] = {}
    for name, value in msg.properties.items():
        if name.lower().startswith("nats-"):
            return _invalid(msg, target,
                            f"header {name!r}: names starting 'Nats-' are JetStream's")
        if not name or any(c in name for c in ": \t\r\n") or any(c in value for c in "\r\n"):
            return _invalid(msg, target, f"header {name!r} cannot be a NATS header (a name without "
                                 f"':' or white space, a value on one line)")
        headers[name] = value
    if msg.tag:
        headers[TAG_HEADER] = msg.tag
    if msg.keys:
        headers[KEYS_HEADER] = " ".join(msg.keys)
    if msg.message_group:
        headers[GROUP_HEADER] = msg.message_group
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
    relay_tuning = RelayTuning(batch_size=500, drain_lanes=6)

    def __init__(self, outbox: Outbox) -> None:
        self.description = f"NATS JetStream at {outbox.broker_display}"
        self._outbox = outbox
        self._timeout = outbox.relay.broker_timeout
        self._client: Client | None = None
        self._js: JetStreamContext | None = None
        self._callbacks: list[Callable[[], None]] = []
        #: topic -> its checked stream
        self._streams: dict[str, str] = {}
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
                self._client = await connect(
                    self._outbox, name=f"{self._outbox.producer_group}-relay",
                    reconnected=self._reconnected)
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
        outcomes: dict[str, HalfOutcome] = {}
        refused = await self._check_streams(js, messages)
        chains: dict[str, list[OutgoingMessage]] = {}
        for msg in messages:
            if msg.topic in refused:
                outcomes[msg.tx_id] = self._refused(msg.tx_id, refused[msg.topic],
                                                    RowFault.CONFIG)
                continue
            chains.setdefault(msg.message_group or f"\0{msg.tx_id}", []).append(msg)
        unreachable: list[BaseException] = []
        client = self._client
        assert client is not None
        loose = [chain[0] for chain in chains.values() if chain[0].message_group is None]
        await asyncio.gather(self._publish_batch(client, loose, outcomes, unreachable),
                             *(self._publish_chain(client, chain, outcomes, unreachable)
                               for chain in chains.values() if chain[0].message_group))
        if unreachable and len(unreachable) == len(chains) == len(outcomes) - _held(outcomes):
            # every publish went unanswered, and nothing else happened: no row is at fault
            raise BrokerUnreachableError(f"{self.description} unreachable: "
                                         f"{_text(unreachable[0])}") from unreachable[0]
        return [outcomes[msg.tx_id] for msg in messages]

    async def _publish_chain(self, client: Client, chain: list[OutgoingMessage],
                             outcomes: dict[str, HalfOutcome],
                             unreachable: list[BaseException]) -> None:
        """Publish ``chain`` (one message group) in order, each row after the previous
        one's ack; after a failure the rest is not published (held back by the relay
        behind it)."""
        for index, msg in enumerate(chain):
            await self._publish_batch(client, [msg], outcomes, unreachable)
            if isinstance(outcomes[msg.tx_id], RowRefusedError):
                for rest in chain[index + 1:]:
                    outcomes[rest.tx_id] = HalfStored(rest.tx_id, rest.topic)
                return

    async def _publish_batch(self, client: Client, batch: list[OutgoingMessage],
                             outcomes: dict[str, HalfOutcome],
                             unreachable: list[BaseException]) -> None:
        """Publish ``batch`` all at once, each row with its own reply subject, then wait
        for their acks with one deadline (``broker_timeout``): each row's outcome is the
        answer to its own publish (:mod:`outbox.targets.nats_acks`)."""
        acks, streams = self._acks, self._streams
        number, reply_to, slots = acks.open(len(batch))
        try:
            for index, msg in enumerate(batch):
                headers = headers_for(msg, self.description)
                if isinstance(headers, RowRefusedError):
                    outcomes[msg.tx_id] = headers
                    slots.fill(index, None)
                    continue
                stream = streams.get(msg.topic)
                if stream is not None:  # JetStream refuses it if another stream takes it
                    headers[EXPECTED_STREAM_HEADER] = stream
                try:
                    await client.publish(subject_for(msg.topic, msg.message_group), msg.body,
                                         reply=f"{reply_to}{index}", headers=headers)
                except Exception as exc:
                    outcomes[msg.tx_id] = self._failed(msg, exc, unreachable)
                    slots.fill(index, None)
            if slots.left:
                await asyncio.wait([slots.done], timeout=self._timeout)
        finally:
            acks.close(number)
        skipped, replies = slots.skipped, slots.slots
        for index, msg in enumerate(batch):
            if index in skipped:
                continue
            answer = AckInbox.outcome(replies[index])
            if isinstance(answer, Acked):
                outcomes[msg.tx_id] = self._stored(msg, answer)
            else:
                outcomes[msg.tx_id] = self._failed(msg, answer, unreachable)

    def _stored(self, msg: OutgoingMessage, ack: Acked) -> HalfStored:
        if ack.duplicate:
            log.debug("%s: already in stream %s at %d (a re-send)", msg.tx_id, ack.stream,
                      ack.seq)
        return HalfStored(msg.tx_id, msg.topic, queue_offset=ack.seq,
                          transaction_id=ack.stream, position=f"{ack.stream}:{ack.seq}")

    def _failed(self, msg: OutgoingMessage, exc: BaseException | None,
                unreachable: list[BaseException]) -> RowRefusedError:
        """The row's refusal for what its publish raised (an unanswered one is noted)."""
        try:
            raise exc or nats.errors.TimeoutError()
        except nats.js.errors.NoStreamResponseError as exc:
            self._streams.pop(msg.topic, None)  # the stream went away: find it again
            return self._refused(msg.tx_id, f"no JetStream stream takes subject "
                                 f"{subject_for(msg.topic, msg.message_group)!r}",
                                 RowFault.CONFIG, exc)
        except nats.js.errors.APIError as exc:
            if exc.err_code == 10060:  # the subject is not in the stream checked for it
                self._streams.pop(msg.topic, None)
            return self._refused(msg.tx_id, _text(exc), _api_fault(exc), exc)
        except nats.errors.MaxPayloadError as exc:
            return self._refused(msg.tx_id, f"body: {_text(exc)} (the server's max_payload)",
                                 RowFault.ROW_INVALID, exc)
        except _UNREACHABLE as exc:
            unreachable.append(exc)
            return self._refused(msg.tx_id, f"no ack: {_text(exc)}", RowFault.TRANSIENT, exc)
        except Exception as exc:
            return self._refused(msg.tx_id, _text(exc), RowFault.TRANSIENT, exc)

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
        return None

    # -- ending: nothing to ask the broker ------------------------------------------------

    async def end_transactions(self, ends: Sequence[TxEnd]) -> list[EndOutcome]:
        outcomes: list[EndOutcome] = []
        for end in ends:
            if position_of(end.half) is None:
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
                          end.state, position_of(end.half), extra={"tx_id": end.tx_id})
            outcomes.append(TxEnded(end.tx_id, position=position_of(end.half)))
        return outcomes


def _held(outcomes: dict[str, HalfOutcome]) -> int:
    """How many rows were not published, held back behind a failure in their group."""
    return sum(1 for o in outcomes.values() if isinstance(o, HalfStored) and o.queue_offset < 0)


def _api_fault(exc: nats.js.errors.APIError) -> RowFault:
    if exc.err_code == 10060:
        return RowFault.CONFIG
    if exc.code is not None and 400 <= exc.code < 500:
        return RowFault.ROW_INVALID
    return RowFault.TRANSIENT


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
