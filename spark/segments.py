"""Decoding commit-log segments inside Spark tasks, with broker_lite's own codec.

One task decodes one segment file (named by its 20-digit start offset, as
broker_lite's CommitLog names them). Only the records the audit needs leave the
task: halves, commits, op records and discards, as flat tuples. A record that
fails its CRCs, or a truncated tail, becomes a *problem* row naming the
segment and the physical offset; decoding then looks for the next sound record
(every record starts with a size and the magic code, and must pass both CRCs
again), so the rest of the segment, and every other segment, is still audited.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Iterator

from broker_lite.core.topics import HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from broker_lite.core.transactions import TX_STATE
from broker_lite.storage.properties import REAL_TOPIC, TRANSACTION_ID, UNIQ_KEY
from broker_lite.storage.record import (
    BLANK_MAGIC,
    MESSAGE_MAGIC,
    TxType,
    decode_record,
    peek_route,
    sysflag_name,
    verify_record,
)

__all__ = [
    "KIND_COMMIT",
    "KIND_DISCARD",
    "KIND_HALF",
    "KIND_OP",
    "PROBLEM",
    "RECORD_FIELDS",
    "SEGMENT_NAME",
    "decode_segment",
    "segment_start",
]

#: a segment file name: its start offset, 20 digits
SEGMENT_NAME = re.compile(r"^\d{20}$")
KIND_HALF, KIND_COMMIT, KIND_OP, KIND_DISCARD = "half", "commit", "op", "discard"
#: the ``kind`` of a row that reports a corrupt or truncated stretch of a segment
PROBLEM = "problem"

#: the fields of every row :func:`decode_segment` yields, in order
RECORD_FIELDS = (
    "kind",            # half | commit | op | discard | problem
    "segment",         # the segment's file name
    "offset",          # physical offset of the record (or of the problem)
    "tx_id",           # __transactionId__, else UNIQ_KEY
    "topic",           # the record's topic (the real topic for a commit)
    "real_topic",      # a half's REAL_TOPIC ("" otherwise)
    "sysflag",         # sysflag_name(): prepared, commit, normal...
    "store_ts",        # store timestamp, ms
    "born_ts",         # born timestamp, ms
    "prepared_offset",  # prepared-transaction offset (a commit's half)
    "tx_state",        # an op's TX_STATE: COMMIT, ROLLBACK, DISCARD, CHECK
    "body_sha256",     # hex sha256 of the body
    "body_crc",        # the record's body CRC32
    "detail",          # a problem's reason ("" otherwise)
)
Row = tuple[str, str, int, str, str, str, str, int, int, int, str, str, int, str]

_MAGIC_BYTES = struct.pack(">I", MESSAGE_MAGIC)
_AUDITED_TOPICS = frozenset({HALF_TOPIC.encode(), OP_TOPIC.encode(),
                             TRANS_CHECK_MAX_TIME_TOPIC.encode()})


def segment_start(name: str) -> int:
    """The start offset a segment's file name carries (``-1`` if it is not one)."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return int(base) if SEGMENT_NAME.match(base) else -1


def _problem(segment: str, offset: int, reason: str) -> Row:
    return (PROBLEM, segment, offset, "", "", "", "", 0, 0, 0, "", "", 0, reason)


def _resync(view: memoryview, data: bytes, pos: int, limit: int) -> int:
    """The position of the next sound record after ``pos``, or ``limit``."""
    at = pos + 1
    while True:
        found = data.find(_MAGIC_BYTES, at + 4, limit)
        if found < 0:
            return limit
        start = found - 4
        checked = verify_record(view, start, limit)
        if not isinstance(checked, str) and checked[1] == MESSAGE_MAGIC:
            return start
        at = start + 1


def _kind(sysflag: int, topic: bytes) -> str | None:
    tx = sysflag & 0xC
    if tx == TxType.PREPARED and topic == HALF_TOPIC.encode():
        return KIND_HALF
    if tx == TxType.COMMIT:
        return KIND_COMMIT
    if topic in _AUDITED_TOPICS:
        return KIND_OP if topic == OP_TOPIC.encode() else KIND_DISCARD
    return None


def decode_segment(name: str, data: bytes) -> Iterator[Row]:
    """Every audited record of one segment, plus a row per corrupt stretch.

    ``name`` is the file's path or name (its last part is the start offset).
    Decoding stops at a blank end-of-file record or where written data ends.
    """
    segment = name.rstrip("/").rsplit("/", 1)[-1]
    start = segment_start(name)
    if start < 0:
        yield _problem(segment, 0, "not a segment file name (20 digits expected)")
        return
    view = memoryview(data)
    limit = len(data)
    pos = 0
    while pos < limit:
        checked = verify_record(view, pos, limit)
        if isinstance(checked, str):
            if checked == "end of written data" and data.count(0, pos) == limit - pos:
                return
            yield _problem(segment, start + pos, checked)
            pos = _resync(view, data, pos, limit)
            continue
        total, magic, _ = checked
        if magic == BLANK_MAGIC:
            return
        sysflag, _qid, _qoff, topic = peek_route(view, pos)
        kind = _kind(sysflag, topic)
        if kind is not None:
            yield _row(kind, segment, view, pos)
        pos += total


def _row(kind: str, segment: str, view: memoryview, pos: int) -> Row:
    rec = decode_record(view, pos, verified=True)
    props = rec.properties
    return (
        kind, segment, rec.physical_offset,
        props.get(TRANSACTION_ID) or props.get(UNIQ_KEY, ""),
        rec.topic, props.get(REAL_TOPIC, ""), sysflag_name(rec.sysflag),
        rec.store_timestamp, rec.born_timestamp, rec.prepared_tx_offset,
        props.get(TX_STATE, ""), hashlib.sha256(rec.body).hexdigest(), rec.body_crc, "",
    )


def decode_segments(files: Iterable[tuple[str, bytes]]) -> Iterator[Row]:
    """:func:`decode_segment` over ``(path, bytes)`` pairs (a Spark partition)."""
    for path, data in files:
        yield from decode_segment(path, data)
