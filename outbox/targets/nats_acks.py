"""JetStream publish acks for a batch of rows, on one reply subscription (the NATS target).

A JetStream publish is a core NATS publish with a reply subject: the
stream answers it with its ack (``{"stream": ..., "seq": ...}``, with
``"duplicate": true`` for a re-sent ``Nats-Msg-Id``), with an error
(``{"error": {...}}``), or the server answers "no responders" (no stream
takes the subject). nats-py's ``publish_async`` does this with one future, a
semaphore acquire, a random token and a parsed ``PubAck`` per message, which
cost as much of the relay worker's loop thread as the rest of the publish
(bench/relay.py --sides nats, py-spy). :class:`AckInbox` does the same for a
whole batch with one subscription per connection and one future per batch:

* each row's reply subject is ``<inbox>.<batch>.<index>``;
* an arriving reply is stored in its batch's slot as it is (no parsing on
  the read loop); the batch's future resolves when every slot is filled.
  On an :class:`AckReadingClient` (the target's connection), a reply
  without headers (every plain ack) goes from nats-py's parser straight to
  its slot as its bytes: no ``Msg``, no subscription queue, no callback
  task per ack (nats-py's ``_process_msg``, overridden for the inbox's
  subjects only); a reply with headers ("no responders") and every other
  message take nats-py's own way;
* the target reads the slots once the batch is done or its deadline passed:
  :meth:`AckInbox.acked` decodes a plain ack (stream, sequence, duplicate)
  straight into the :class:`Acked` it answers; :meth:`AckInbox.outcome`
  says what any other reply is: the client's own exception for an error or
  "no responders" (so the target keeps one mapping of errors to row faults),
  or None (no answer in time).

A row's outcome comes only from the reply to its own publish: a row is
marked relayed only on its own ack.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import msgspec
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

__all__ = ["AckInbox", "AckReadingClient", "AckSlots", "Acked"]

#: the status header of a "no responders" answer (no stream takes the subject)
_STATUS_HEADER = "Status"
_NO_RESPONDERS = "503"


class Acked(msgspec.Struct, frozen=True):
    """A JetStream publish reply as decoded (the fields the target reads); as an outcome
    (:meth:`AckInbox.outcome`): the stream stored the row at ``seq`` (``duplicate``: it had
    it already, a re-send), and ``error`` is None."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, Any] | None = None


_decode_reply = msgspec.json.Decoder(Acked).decode


@dataclass(slots=True)
class AckSlots:
    """One batch's replies, by index, and the future that resolves when all are in."""

    done: asyncio.Future[None]
    #: a reply's bytes (no headers: :class:`AckReadingClient`), or its ``Msg``
    slots: list[bytes | Msg | None]
    left: int
    #: indexes whose publish raised before it was sent (no reply will come)
    skipped: set[int] = field(default_factory=set)

    def fill(self, index: int, reply: bytes | Msg | None) -> None:
        if 0 <= index < len(self.slots) and self.slots[index] is None \
                and index not in self.skipped:
            if reply is None:
                self.skipped.add(index)
            else:
                self.slots[index] = reply
            self.left -= 1
            if self.left == 0 and not self.done.done():
                self.done.set_result(None)


class AckInbox:
    """The reply subscription of one connection and the batches waiting on it."""

    def __init__(self) -> None:
        self._prefix = ""
        self._prefix_bytes = b""
        self._subscription: Subscription | None = None
        #: by reply-subject prefix (``<inbox>.<batch>``, the row's index follows)
        self._batches: dict[bytes, AckSlots] = {}
        self._numbers = itertools.count()

    async def start(self, client: Client) -> None:
        """Subscribe to ``<new inbox>.>`` on ``client`` (nats-py re-subscribes after a
        reconnect)."""
        self._prefix = client.new_inbox() + "."
        self._prefix_bytes = self._prefix.encode()
        self._subscription = await client.subscribe(self._prefix + ">", cb=self._arrived)
        if isinstance(client, AckReadingClient):
            client.ack_inbox = self

    def open(self, size: int) -> tuple[bytes, bytes, AckSlots]:
        """A new batch of ``size`` rows: its key (``<inbox>.<number>``), its reply-subject
        prefix (add the row's index), encoded, and its slots. :meth:`close` it when done."""
        number = b"%b%d" % (self._prefix_bytes, next(self._numbers))
        loop = asyncio.get_running_loop()
        batch = AckSlots(loop.create_future(), [None] * size, size)
        if size == 0:
            batch.done.set_result(None)
        self._batches[number] = batch
        return number, number + b".", batch

    def close(self, number: bytes) -> None:
        """Forget batch ``number``: a reply arriving later is dropped."""
        self._batches.pop(number, None)

    def deliver(self, subject: bytes, reply: bytes | Msg) -> bool:
        """Store ``reply`` if ``subject`` is a row's of an open batch: False if it is not
        (another subscription's, or a reply that came after its batch closed)."""
        number, _, index = subject.rpartition(b".")
        batch = self._batches.get(number)
        if batch is None:
            return False
        try:
            index_number = int(index)
        except ValueError:  # an index that is none of ours
            return True
        batch.fill(index_number, reply)
        return True

    async def _arrived(self, msg: Msg) -> None:
        self.deliver(msg.subject.encode(), msg)

    @staticmethod
    def acked(reply: bytes | Msg | None) -> Acked | None:
        """The ack ``reply`` is, when it is a plain one (a stream and a sequence, no error):
        the common case, read with one decode; None for anything else (then
        :meth:`outcome` says what it is)."""
        if reply is None:
            return None
        if not isinstance(reply, bytes):
            if reply.headers:
                return None
            reply = reply.data
        try:
            answer = _decode_reply(reply)
        except msgspec.DecodeError:
            return None
        if answer.error is None and answer.stream and answer.seq > 0:
            return answer
        return None

    @staticmethod
    def outcome(reply: bytes | Msg | None) -> Acked | BaseException | None:
        """What one row's reply says: :class:`Acked`, the client's exception for a refusal,
        or None (no reply)."""
        if reply is None:
            return None
        if isinstance(reply, bytes):
            data = reply
        else:
            headers, data = reply.headers, reply.data
            if headers and headers.get(_STATUS_HEADER) == _NO_RESPONDERS:
                return nats.js.errors.NoStreamResponseError()
        try:
            answer = _decode_reply(data)
        except msgspec.DecodeError as exc:
            return nats.js.errors.Error(f"unreadable publish ack {data[:200]!r}: {exc}")
        if answer.error is not None:
            try:  # it raises the error's class (BadRequestError, ...), never returns
                nats.js.errors.APIError.from_error(answer.error)
            except nats.js.errors.APIError as exc:
                return exc
            except (KeyError, TypeError):
                pass
            return nats.js.errors.APIError(description=str(answer.error)[:500])
        if not answer.stream or answer.seq <= 0:
            return nats.js.errors.Error(f"publish ack without stream and sequence: "
                                        f"{data[:200]!r}")
        return answer


class AckReadingClient(Client):
    """nats-py's client, handing each reply without headers on its :class:`AckInbox`'s
    subjects straight to the inbox (set by :meth:`AckInbox.start`) as its bytes.

    nats-py's ``_process_msg`` would build a ``Msg``, put it on the
    subscription's queue and run the callback from its task, for each ack;
    everything else (replies with headers, other subscriptions, JetStream
    API answers) still goes that way. The counters nats-py keeps
    (``stats``) count these replies too.
    """

    ack_inbox: AckInbox | None = None

    async def _process_msg(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                           headers: bytes | None) -> None:
        inbox = self.ack_inbox
        if inbox is not None and not headers and inbox.deliver(subject, data):
            stats = self.stats
            stats["in_msgs"] += 1
            stats["in_bytes"] += len(data)
            return
        await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]
