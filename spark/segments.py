"""Decoding commit-log segments inside Spark tasks, split by byte range.

Works on either broker's log: broker_lite's and Apache RocketMQ 5's segments
are the same format (:mod:`broker_lite.storage.record`). A segment (20-digit
start offset as its name; RocketMQ's are 1 GiB) is cut into byte ranges, one
task each. A task decodes the records that *start* in its range, reading past
the range's end to finish its last one. Records straddle range boundaries, so
a task that does not start at the segment's start looks for the first
*anchored* record at or after its range start: a sound record (lengths add
up, body CRC and ``__CRC32#`` when present) whose physical-offset field equals
its own position. A body would have to embed a whole valid record carrying its
own future position to fake that. The previous task's chain of total sizes
lands on the same record, so each record is decoded once.

Only the records the audit needs leave a task: halves, commits, op records
and discards, as flat tuples, each keyed by the row it belongs to: the
``ROCKETBOX_TX_ID`` property the relay sets on every target (through a
RocketMQ 5 proxy ``__transactionId__`` is the proxy's, one per half), else
``__transactionId__``, else ``UNIQ_KEY``. Records of the broker's own
topics (RocketMQ's ``rmq_sys_REVIVE_LOG_*``, ``rmq_sys_wheel_timer``...)
never leave a task, whatever their sysflag. A record that fails its checks, or a torn tail,
becomes a *problem* row naming the segment and the physical offset (reported
by the task whose chain meets it, even just past its range); decoding then
moves to the next anchored record, so the rest is still audited.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Callable, Iterable, Iterator

from broker_lite.core.transactions import TX_STATE, op_offsets
from broker_lite.errors import CorruptRecordError
from broker_lite.storage.body import message_body
from broker_lite.storage.properties import (
    REAL_TOPIC,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    UNIQ_KEY,
)
from broker_lite.storage.record import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    TxType,
    decode_record,
    peek_route,
    sysflag_name,
    verify_record,
)
from broker_lite.values.names import (
    DLQ_PREFIX,
    HALF_TOPIC,
    OP_TOPIC,
    RETRY_PREFIX,
    SYSTEM_TOPIC_PREFIX,
    TRANS_CHECK_MAX_TIME_TOPIC,
)

__all__ = [
    "KIND_COMMIT",
    "KIND_DISCARD",
    "KIND_HALF",
    "KIND_OP",
    "PROBLEM",
    "RECORD_FIELDS",
    "ROW_KEY",
    "SEGMENT_NAME",
    "Fetch",
    "decode_segment",
    "decode_split",
    "pyarrow_uri",
    "segment_start",
]

#: the user property rocketbox's relay puts the row's ``tx_id`` in (on every target; through
#: a RocketMQ 5 proxy the transaction id is the proxy's, one per half, so this is the key)
ROW_KEY = "ROCKETBOX_TX_ID"
#: topics of the broker's own bookkeeping (RocketMQ: ``rmq_sys_REVIVE_LOG_<cluster>``,
#: ``rmq_sys_wheel_timer``, ``SCHEDULE_TOPIC_XXXX``...): never a transaction's record
SYSTEM_PREFIXES = (b"rmq_sys_", b"SCHEDULE_TOPIC_",
                   *(prefix.encode() for prefix in (SYSTEM_TOPIC_PREFIX, RETRY_PREFIX, DLQ_PREFIX)))
#: a segment file name: its start offset, 20 digits
SEGMENT_NAME = re.compile(r"^\d{20}$")
KIND_HALF, KIND_COMMIT, KIND_OP, KIND_DISCARD = "half", "commit", "op", "discard"
#: the ``kind`` of a row that reports a corrupt or truncated stretch of a segment
PROBLEM = "problem"

#: the fields of every row :func:`decode_split` yields, in order
RECORD_FIELDS = (
    "kind",            # half | commit | op | discard | problem
    "segment",         # the segment's file name
    "offset",          # physical offset of the record (or of the problem)
    "tx_id",           # the row's key: ROCKETBOX_TX_ID, else __transactionId__, else
                       # UNIQ_KEY (an op: __transactionId__ or "")
    "topic",           # the record's topic (the real topic for a commit)
    "real_topic",      # a half's REAL_TOPIC ("" otherwise)
    "sysflag",         # sysflag_name(): normal, commit, normal+compressed...
    "store_ts",        # store timestamp, ms
    "born_ts",         # born timestamp, ms
    "prepared_offset",  # prepared-transaction offset (a commit's half copy)
    "tx_state",        # a broker_lite op's TX_STATE: COMMIT, ROLLBACK ("" for RocketMQ's)
    "body_sha256",     # hex sha256 of the body as produced (decompressed)
    "body_crc",        # the record's body CRC
    "detail",          # a problem's reason ("" otherwise)
    "queue_id",        # the record's queue id
    "queue_offset",    # the record's queue offset (a half's: what op records name)
    "op_offsets",      # an op's body: the half-queue offsets it removes, "12,13"
    "check_times",     # TRANSACTION_CHECK_TIMES of a renewed half or a discard (else 0)
)
Row = tuple[str, str, int, str, str, str, str, int, int, int, str, str, int, str,
            int, int, str, int]
#: ``fetch(position, length)``: bytes of the segment file from ``position``
Fetch = Callable[[int, int], bytes]

_MAGICS = (struct.pack(">I", MAGIC_V1), struct.pack(">I", MAGIC_V2))
_TOTAL = struct.Struct(">I")
_PHYS = struct.Struct(">q")
_HALF, _OP, _MAX = HALF_TOPIC.encode(), OP_TOPIC.encode(), TRANS_CHECK_MAX_TIME_TOPIC.encode()
_OVERHANG = 4 * 1024 * 1024 + 64 * 1024  # RocketMQ's default maxMessageSize, plus slack


def segment_start(name: str) -> int:
    """The start offset a segment's file name carries (``-1`` if it is not one)."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return int(base) if SEGMENT_NAME.match(base) else -1


def _problem(segment: str, offset: int, reason: str) -> Row:
    return (PROBLEM, segment, offset, "", "", "", "", 0, 0, 0, "", "", 0, reason, 0, 0, "", 0)


def _kind(sysflag: int, topic: bytes) -> str | None:
    """What the audit reads a record as; ``None``: not a transaction's (system topics too)."""
    if topic == _HALF:
        return KIND_HALF
    if topic == _OP:
        return KIND_OP
    if topic == _MAX:
        return KIND_DISCARD
    if topic.startswith(SYSTEM_PREFIXES):
        return None
    return KIND_COMMIT if sysflag & 0xC == TxType.COMMIT else None


class _Window:
    """The bytes of one segment from ``base``, fetched again (longer) when a record needs it."""

    def __init__(self, fetch: Fetch, size: int, base: int, want: int) -> None:
        self.fetch, self.size, self.base = fetch, size, base
        self.data = b""
        self.view = memoryview(self.data)
        self.grow(want)

    def grow(self, want: int) -> None:
        end = min(self.size, self.base + max(want, len(self.data)))
        self.data = self.fetch(self.base, end - self.base)
        self.view = memoryview(self.data)

    @property
    def end(self) -> int:
        return self.base + len(self.data)

    def ensure(self, pos: int) -> None:
        """Make the record (or 12 header bytes) at segment position ``pos`` fully present."""
        local = pos - self.base
        if local + 12 > len(self.data) and self.end < self.size:
            self.grow(local + 12 + _OVERHANG)
        if local + 4 <= len(self.data):
            total = _TOTAL.unpack_from(self.data, local)[0]
            if len(self.data) < local + total and self.end < self.size and \
                    pos + total <= self.size:
                self.grow(local + total)


def _anchored(win: _Window, start: int, pos: int, stop: int) -> int:
    """The first anchored record at segment position >= ``pos`` (before ``stop``), or -1."""
    at = pos - win.base
    while True:
        if win.base + at >= stop:
            return -1
        found = [i for i in (win.data.find(m, at + 4) for m in _MAGICS) if i >= 0]
        if not found:
            if win.end >= min(stop + _OVERHANG, win.size):
                return -1
            win.grow(len(win.data) + _OVERHANG)
            continue
        cand = min(found) - 4
        cpos = win.base + cand
        if cpos >= stop:
            return -1
        win.ensure(cpos)
        local = cpos - win.base
        if local + 36 <= len(win.data) and \
                _PHYS.unpack_from(win.data, local + 28)[0] == start + cpos:
            checked = verify_record(win.view, local, len(win.data))
            if not isinstance(checked, str) and checked[1] != BLANK_MAGIC:
                return cpos
        at = cand + 1


def decode_split(name: str, fetch: Fetch, size: int, lo: int, hi: int) -> Iterator[Row]:
    """Audited rows of the records starting in ``[lo, hi)`` of one segment file of ``size``."""
    segment = name.rstrip("/").rsplit("/", 1)[-1]
    start = segment_start(name)
    if start < 0:
        if lo == 0:
            yield _problem(segment, 0, "not a segment file name (20 digits expected)")
        return
    win = _Window(fetch, size, lo, hi - lo + _OVERHANG if hi < size else hi - lo)
    pos = lo if lo == 0 else _anchored(win, start, lo, hi)
    while 0 <= pos < size:
        win.ensure(pos)
        local = pos - win.base
        checked = verify_record(win.view, local, len(win.data))
        if isinstance(checked, str):
            if win.data.count(0, local) == len(win.data) - local:
                return  # zeros to the end of what is held: the end of written data
            yield _problem(segment, start + pos, checked)
            if pos >= hi:
                return
            pos = _anchored(win, start, pos + 1, hi)
            continue
        total, magic, _ = checked
        if magic == BLANK_MAGIC or pos >= hi:
            return
        row = _row_at(segment, win.view, local)
        if row is not None:
            yield row
        pos += total


def _row_at(segment: str, view: memoryview, pos: int) -> Row | None:
    sysflag, _qid, _qoff, topic = peek_route(view, pos)
    kind = _kind(sysflag, topic)
    if kind is None:
        return None
    rec = decode_record(view, pos, verified=True)
    try:
        body = message_body(rec)
    except CorruptRecordError as exc:
        return _problem(segment, rec.physical_offset, str(exc).split(": ", 1)[-1])
    props = rec.properties
    tx_id = props.get(TRANSACTION_ID, "")
    if kind != KIND_OP:
        tx_id = props.get(ROW_KEY) or tx_id or props.get(UNIQ_KEY, "")
    times = props.get(TRANSACTION_CHECK_TIMES, "")
    return (
        kind, segment, rec.physical_offset, tx_id,
        rec.topic, props.get(REAL_TOPIC, ""), sysflag_name(rec.sysflag),
        rec.store_timestamp, rec.born_timestamp, rec.prepared_tx_offset,
        props.get(TX_STATE, "") if kind == KIND_OP else "", hashlib.sha256(body).hexdigest(),
        rec.body_crc, "", rec.queue_id, rec.queue_offset,
        ",".join(map(str, op_offsets(rec.body))) if kind == KIND_OP else "",
        int(times) if times.isdigit() else 0,
    )


def decode_segment(name: str, data: bytes) -> Iterator[Row]:
    """Every audited record of one whole segment held in memory, plus problem rows."""
    def fetch(position: int, length: int) -> bytes:
        return data[position : position + length]
    return decode_split(name, fetch, len(data), 0, len(data))


#: Hadoop's URI schemes pyarrow knows under another name (Hadoop's S3A connector lists
#: ``s3a://bucket/key``; pyarrow's S3 file system reads ``s3://bucket/key``)
_PYARROW_SCHEMES = {"s3a": "s3", "s3n": "s3"}


def pyarrow_uri(uri: str) -> str:
    """``uri`` as pyarrow's ``FileSystem.from_uri`` names it (``s3a://b/k`` -> ``s3://b/k``)."""
    scheme, sep, rest = uri.partition("://")
    return f"{_PYARROW_SCHEMES.get(scheme.lower(), scheme)}{sep}{rest}" if sep else uri


def open_fetch(uri: str) -> tuple[Fetch, int]:
    """``(fetch, size)`` for a file at a Hadoop-style URI, read through pyarrow's file systems."""
    from pyarrow import fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(pyarrow_uri(uri))
    handle = filesystem.open_input_file(path)

    def fetch(position: int, length: int) -> bytes:
        return bytes(handle.read_at(length, position))
    return fetch, int(handle.size())


def decode_splits(splits: Iterable[tuple[str, str, int, int]]) -> Iterator[Row]:
    """:func:`decode_split` over ``(uri, name, lo, hi)`` tuples (a Spark partition)."""
    opened: dict[str, tuple[Fetch, int]] = {}
    for uri, name, lo, hi in splits:
        if uri not in opened:
            opened[uri] = open_fetch(uri)
        fetch, size = opened[uri]
        yield from decode_split(name, fetch, size, lo, min(hi, size))
