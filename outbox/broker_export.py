"""A broker export: what a broker committed, one JSON object per line, for the audit.

The audit (``rocketbox audit --broker-export PATH``) compares the status table
with what the broker committed. broker_lite and Apache RocketMQ keep a commit
log the audit decodes itself; any other target (NATS JetStream, RabbitMQ) hands
it an export instead: one :class:`ExportedMessage` per message the broker
holds, written with :func:`write_export` and read back with :func:`read_export`.
docs/audit.md ("Broker export: auditing any target") describes the format.

Each line is a JSON object with exactly these keys (others are refused, so a
misspelt key is found, not silently dropped)::

    {"tx_id": "...", "position": "ORDERS:42", "time_ms": 1764316800123,
     "body_sha256": "<64 lowercase hex digits>", "destination": "orders.created"}

Empty lines are skipped. A bad line raises :class:`ExportFormatError` naming the
file, the line number and the field. Stdlib and msgspec only: a target's
exporter and the Spark job's tasks import this without the rest of the outbox.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from outbox.errors import OutboxError

__all__ = ["EXPORT_FIELDS", "MAX_POSITION", "MAX_TX_ID", "ExportFormatError", "ExportedMessage",
           "body_sha256", "read_export", "write_export"]

#: the keys of every line, in the order :func:`write_export` writes them
EXPORT_FIELDS = ("tx_id", "position", "time_ms", "body_sha256", "destination")
#: the longest ``tx_id`` a line may carry (the status table's are at most 64 characters;
#: a longer one can match no row: the audit calls it ``phantom``)
MAX_TX_ID = 255
#: the longest position (``rocketbox_transaction.broker_position``)
MAX_POSITION = 255
_SHA256 = re.compile(r"[0-9a-f]{64}")
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class ExportFormatError(OutboxError, ValueError):
    """A broker export line (or message) that is not as the format says.

    ``field`` names the key at fault (``""``: the line as a whole); ``path`` and
    ``line`` where it is, when it was read from a file (``line`` counts from 1).
    """

    def __init__(self, message: str, *, field: str = "", path: str = "",
                 line: int = 0) -> None:
        super().__init__(message)
        self.field = field
        self.path = path
        self.line = line


def body_sha256(body: bytes) -> str:
    """The hex sha256 an export carries for a message body (as the broker stored it)."""
    return hashlib.sha256(body).hexdigest()


def _text(name: str, value: object, limit: int) -> None:
    if not isinstance(value, str):
        raise ExportFormatError(f"{name} must be a string, not {type(value).__name__}",
                                field=name)
    if not value:
        raise ExportFormatError(f"{name} is empty", field=name)
    if len(value) > limit:
        raise ExportFormatError(f"{name} is {len(value)} characters long; the limit is {limit}",
                                field=name)


@dataclass(frozen=True, slots=True)
class ExportedMessage:
    """One message the broker committed, in the broker's own words.

    Checked when made: a bad field raises :class:`ExportFormatError` naming it.
    """

    #: the row's tx_id as the broker carries it (the relay's message id / ROCKETBOX_TX_ID)
    tx_id: str
    #: where the broker keeps it: ``STREAM:SEQ`` (JetStream), ``STREAM:OFFSET`` or
    #: ``QUEUE:N`` (RabbitMQ), the commit-log offset (broker_lite)
    position: str
    #: when the broker stored it, ms since the epoch (UTC)
    time_ms: int
    #: hex sha256 of the body as stored (:func:`body_sha256`)
    body_sha256: str
    #: subject / queue / stream / topic
    destination: str

    def __post_init__(self) -> None:
        _text("tx_id", self.tx_id, MAX_TX_ID)
        _text("position", self.position, MAX_POSITION)
        if type(self.time_ms) is not int:  # bool is an int: refuse it too
            raise ExportFormatError(f"time_ms must be an integer (ms since the epoch), not "
                                    f"{type(self.time_ms).__name__}", field="time_ms")
        if self.time_ms < 0:
            raise ExportFormatError(f"time_ms is {self.time_ms}; it must be >= 0",
                                    field="time_ms")
        if not isinstance(self.body_sha256, str) or not _SHA256.fullmatch(self.body_sha256):
            raise ExportFormatError(f"body_sha256 must be 64 lowercase hex digits, not "
                                    f"{self.body_sha256!r:.80}", field="body_sha256")
        _text("destination", self.destination, MAX_POSITION)


def _message(fields: Any) -> ExportedMessage:
    """The message a decoded line holds (``ExportFormatError`` without a place)."""
    if not isinstance(fields, dict):
        raise ExportFormatError(f"a line must be a JSON object, not {type(fields).__name__}")
    for name in EXPORT_FIELDS:
        if name not in fields:
            raise ExportFormatError(f"{name} is missing", field=name)
    extra = sorted(set(fields) - set(EXPORT_FIELDS))
    if extra:
        raise ExportFormatError(f"unknown key {extra[0]!r}; a line has exactly "
                                f"{', '.join(EXPORT_FIELDS)}", field=extra[0])
    return ExportedMessage(**fields)


def write_export(messages: Iterable[ExportedMessage], path: Path) -> int:
    """Write ``messages`` to ``path`` as JSON Lines; returns how many.

    Written to ``path``'s name + ``.tmp`` and renamed into place, so a reader
    never sees half an export (and a failed write leaves the old file).
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    try:
        with tmp.open("wb") as out:
            for message in messages:
                if not isinstance(message, ExportedMessage):
                    raise ExportFormatError(f"message {count + 1} is a "
                                            f"{type(message).__name__}, not an ExportedMessage")
                out.write(_encoder.encode({name: getattr(message, name)
                                           for name in EXPORT_FIELDS}))
                out.write(b"\n")
                count += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return count


def read_export(path: Path) -> Iterator[ExportedMessage]:
    """The messages of the export at ``path``, in file order.

    A line that is not a JSON object with the five fields, each as the format
    says, raises :class:`ExportFormatError` naming ``path``, the line number
    and the field. Empty lines are skipped.
    """
    path = Path(path)
    with path.open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                yield _message(_decoder.decode(raw))
            except ExportFormatError as exc:
                where = f" ({exc.field})" if exc.field else ""
                raise ExportFormatError(f"{path}: line {number}{where}: {exc}",
                                        field=exc.field, path=str(path), line=number) from None
            except msgspec.DecodeError as exc:
                raise ExportFormatError(f"{path}: line {number}: not JSON ({exc})",
                                        path=str(path), line=number) from None
