"""A batch of rows as NATS ``HPUB`` commands, written to nats-py's buffer at once (the NATS target).

nats-py's ``Client.publish`` spends, on every message: two subject checks
(a regex each), its connection-state checks, the header dict encoded name by
name (a regex per name, ``strip``, ``translate``, ``encode``), the ``HPUB``
line formatted and joined, two coroutines and a flusher check. The relay
publishes batches of rows that share their topic's subject and headers, so:

* :func:`topic_wire` does a topic's part once: its subject checked and
  encoded, and the tail of every header block (``Nats-Expected-Stream``);
* :func:`row_head` encodes a row's header block: the bytes nats-py writes
  for the same headers, in the same order (``tests/targets/nats`` compares
  them); a header nats-py would refuse (its name is not an RFC 7230 token)
  refuses the row here, naming it;
* :func:`hpub` is one ``HPUB`` command, as nats-py's ``hpub_cmd`` writes it;
* :func:`write_commands` checks the connection as ``publish`` does and puts
  a whole batch's commands on nats-py's pending buffer as one command, then
  wakes its flusher: one socket write for the batch. It uses two internals
  of nats-py 2 (``_send_command``, ``_flush_pending``; the ``nats`` extra
  pins ``nats-py<3``), which :func:`check_client` looks for at start, with
  the one the acks are read through
  (:class:`~outbox.targets.nats_acks.AckReadingClient`, ``_process_msg``).

What the server sees is what ``publish`` sends, message for message, so
each row still has its own reply subject and its own ack.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import nats
import nats.errors
from nats.aio.client import Client

from outbox.targets.base import OutgoingMessage
from outbox.targets.internals import require_internals

__all__ = ["CLIENT_INTERNALS", "EXPECTED_STREAM_HEADER", "GROUP_HEADER", "KEYS_HEADER",
           "MSG_ID_HEADER", "TAG_HEADER", "TopicWire", "check_client", "header_problem", "hpub",
           "row_head", "topic_wire", "tx_id_problem", "write_commands"]

#: JetStream's de-duplication header: the row's ``tx_id``
MSG_ID_HEADER = "Nats-Msg-Id"
#: the row's tag, keys (space-separated) and message group, as it wrote them
TAG_HEADER = "Rocketbox-Tag"
KEYS_HEADER = "Rocketbox-Keys"
GROUP_HEADER = "Rocketbox-Message-Group"
#: the stream checked for the row's topic: JetStream refuses the row if another takes it
EXPECTED_STREAM_HEADER = "Nats-Expected-Stream"

#: what :func:`write_commands` uses of a nats-py client beyond its public API (nats-py 2's)
CLIENT_INTERNALS = ("_send_command", "_flush_pending", "_process_msg", "stats")

#: a header name nats-py sends (an RFC 7230 token; its ``_HEADER_KEY_RE``)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: what a subject must not hold (nats-py's check; a line break would end the command)
_SUBJECT_BAD = re.compile(r"[ \t\r\n]")
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_START = b"NATS/1.0\r\n"
_MSG_ID = f"{MSG_ID_HEADER}: ".encode()
_CRLF = b"\r\n"


@dataclass(frozen=True, slots=True)
class TopicWire:
    """What every row of one topic shares on the wire."""

    topic: str
    #: the subject of the topic's rows without a message group (``topic``, encoded)
    subject: bytes
    #: ends each row's header block: ``\\r\\nNats-Expected-Stream: S\\r\\n\\r\\n`` (after the
    #: ``Nats-Msg-Id`` value), or only ``\\r\\n\\r\\n`` when no stream was checked
    tail: bytes
    #: why no row of the topic can be published (its name is no subject), or None
    problem: str | None = None


def topic_wire(topic: str, stream: str | None) -> TopicWire:
    """The shared part of ``topic``'s rows, their stream checked to be ``stream``."""
    tail = (_CRLF + f"{EXPECTED_STREAM_HEADER}: {stream.strip()}".encode() + _CRLF + _CRLF
            if stream else _CRLF + _CRLF)
    if not topic or _SUBJECT_BAD.search(topic):
        return TopicWire(topic, b"", tail, f"topic {topic!r} cannot be a NATS subject (it "
                                           f"must be non-empty, without spaces or line breaks)")
    return TopicWire(topic, topic.encode(), tail)


def _value(text: str) -> bytes:
    """A header value as nats-py writes it (stripped, line breaks as spaces)."""
    return text.strip().translate(_NEWLINES).encode()


def header_problem(name: str, value: str) -> str | None:
    """Why a row's own header ``name: value`` cannot go out, naming it; None if it can."""
    if name.lower().startswith("nats-"):
        return f"header {name!r}: names starting 'Nats-' are JetStream's"
    if not _TOKEN.fullmatch(name) or "\r" in value or "\n" in value:
        return (f"header {name!r} cannot be a NATS header (a name of letters, digits and "
                f"!#$%&'*+-.^_`|~, a value on one line)")
    return None


def tx_id_problem(tx_id: str) -> str | None:
    """Why ``tx_id`` cannot be a ``Nats-Msg-Id`` value, or None."""
    if not tx_id or "\n" in tx_id or "\r" in tx_id or tx_id != tx_id.strip():
        return (f"tx_id {tx_id!r} cannot be a {MSG_ID_HEADER} header (one line, no spaces "
                f"around it)")
    return None


def row_head(msg: OutgoingMessage, tail: bytes) -> bytes | str:
    """``msg``'s header block (:func:`topic_wire`'s ``tail`` ends it), or what is wrong with
    it, naming the field or the header.

    The headers, in order: the row's own (``properties``), ``Rocketbox-Tag``,
    ``Rocketbox-Keys``, ``Rocketbox-Message-Group``, ``Nats-Msg-Id``; then the
    tail's ``Nats-Expected-Stream``. A property named ``Nats-*`` (JetStream's),
    one whose name is not a token or whose value holds a line break
    (:func:`header_problem`), and a ``tx_id`` that is not one clean line refuse
    the row.
    """
    tx_id = msg.tx_id
    problem = tx_id_problem(tx_id)
    if problem is not None:
        return problem
    if not (msg.properties or msg.tag or msg.keys or msg.message_group):
        return _START + _MSG_ID + tx_id.encode() + tail
    parts = [_START]
    for name, value in msg.properties.items():
        problem = header_problem(name, value)
        if problem is not None:
            return problem
        parts += (name.encode(), b": ", _value(value), _CRLF)
    for name, text in ((TAG_HEADER, msg.tag), (KEYS_HEADER, " ".join(msg.keys)),
                       (GROUP_HEADER, msg.message_group)):
        if text:
            parts += (name.encode(), b": ", _value(text), _CRLF)
    parts += (_MSG_ID, tx_id.encode(), tail)
    return b"".join(parts)


def hpub(subject: bytes, reply: bytes, head: bytes, body: bytes) -> bytes:
    """One ``HPUB`` command: ``subject``, ``reply``, the header block ``head``, ``body``."""
    return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (subject, reply, len(head), len(head) + len(body),
                                              head, body)


def check_client(client: object) -> None:
    """Fail fast, naming the package, when a nats-py client lacks what a batch is written
    through (a nats-py outside the ``nats`` extra's range): every row would fail."""
    require_internals(client, Client, CLIENT_INTERNALS, target="NATS", package="nats-py",
                      version=getattr(nats, "__version__", "?"), writes="batches",
                      extra="nats", pin="nats-py>=2.6,<3")


async def write_commands(client: Client, commands: Sequence[bytes]) -> None:
    """Put ``commands`` (:func:`hpub`'s) on ``client``'s pending buffer as one, and wake its
    flusher, as ``publish`` does for one.

    Raises what ``publish`` raises before sending: ``ConnectionClosedError``,
    ``ConnectionDrainingError``; and ``ConnectionReconnectingError`` while the
    connection is down (``publish`` would buffer them; the target's pass
    then fails as a whole and the relay retries it).
    """
    if not commands:
        return
    if client.is_closed:
        raise nats.errors.ConnectionClosedError
    if client.is_draining_pubs:
        raise nats.errors.ConnectionDrainingError
    if not client.is_connected:
        raise nats.errors.ConnectionReconnectingError
    payload = b"".join(commands)
    stats = client.stats  # as publish counts them (out_bytes: here the commands' bytes)
    stats["out_msgs"] += len(commands)
    stats["out_bytes"] += len(payload)
    await client._send_command(payload)
    await client._flush_pending()
