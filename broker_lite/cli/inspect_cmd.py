"""``broker-lite inspect``: offline, read-only dump and check of a commit log.

Reads a broker_lite data directory (``--data-dir``) or a bare folder of
commit-log segments (``--commitlog``: broker_lite's ``commitlog/`` or Apache
RocketMQ's ``store/commitlog/``), whose segment size is taken from the files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from broker_lite.errors import CorruptRecordError, StorageError
from broker_lite.storage.body import inner_messages, message_body
from broker_lite.storage.commitlog import CommitLog, Corruption
from broker_lite.storage.layout import read_layout
from broker_lite.storage.properties import KEYS, TAGS, TRANSACTION_ID, UNIQ_KEY
from broker_lite.storage.record import (
    StoredRecord,
    SysFlag,
    decode_record,
    format_host,
    sysflag_name,
)

__all__ = ["record_json", "register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="print every commit-log record as a JSON line (offline, read-only)",
        description=(
            "Read a broker_lite data directory, or a bare folder of commit-log segments "
            "(broker_lite's commitlog/ or Apache RocketMQ's store/commitlog/), without "
            "changing it and print one JSON line per commit-log record, half and op records "
            "included. Reads RocketMQ 5's record versions (V1 and V2 magic), IPv4 and IPv6 "
            "hosts, compressed bodies (zlib, LZ4, ZSTD) and inner batches. Every record's "
            "CRCs are checked (the __CRC32# property too when present; a broker_lite data "
            "directory created with it must have it on every record); with --verify the "
            "command exits 1 at the first corrupt or unreadable record and names its offset "
            "on stderr."
        ),
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", type=Path, help="the broker's data directory")
    where.add_argument("--commitlog", type=Path, metavar="DIR",
                       help="a bare folder of segments; the segment size comes from the files")
    p.add_argument("--verify", action="store_true",
                   help="print nothing per record; check every CRC and exit 1 on corruption")
    p.add_argument("--from", dest="start", type=int, default=None, metavar="OFFSET",
                   help="start at this physical offset (a record boundary)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--segment-size", type=int, default=None,
                   help="segment size in bytes (default: meta.json, else the files)")
    p.set_defaults(handler=run)


def record_json(record: StoredRecord) -> dict[str, Any]:
    props = record.properties
    return {
        "offset": record.physical_offset,
        "size": record.total_size,
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "magic": f"0x{record.magic:08X}",
        "sysflag": sysflag_name(record.sysflag),
        "sysflag_bits": record.sysflag,
        "transaction_id": props.get(TRANSACTION_ID) or props.get(UNIQ_KEY),
        "keys": props.get(KEYS, ""),
        "tag": props.get(TAGS),
        "store_timestamp": record.store_timestamp,
        "born_timestamp": record.born_timestamp,
        "born_host": format_host(record.born_host),
        "store_host": format_host(record.store_host),
        "prepared_tx_offset": record.prepared_tx_offset,
        "reconsume_times": record.reconsume_times,
        "properties": props,
        "body_length": len(record.body),
        "body_crc": record.body_crc,
        "body_sha256": hashlib.sha256(message_body(record)).hexdigest(),
        "crc_tail": record.crc_tail,
        **({"inner_messages": len(inner_messages(record))}
           if record.sysflag & SysFlag.INNER_BATCH else {}),
    }


def segment_size_of(log_dir: Path) -> int:
    """The segment size a folder of segments was written with, from the files alone."""
    segments = sorted(log_dir.glob("[0-9]" * 20))
    if len(segments) >= 2:
        return int(segments[1].name) - int(segments[0].name)
    if segments:
        return segments[0].stat().st_size
    raise StorageError(f"{log_dir} holds no commit-log segment (20-digit file names)")


def _open(args: argparse.Namespace) -> CommitLog:
    if args.commitlog is not None:
        log_dir: Path = args.commitlog
        if not log_dir.is_dir():
            raise StorageError(f"{log_dir} is not a directory")
        return CommitLog(log_dir, args.segment_size or segment_size_of(log_dir), readonly=True)
    data_dir: Path = args.data_dir
    if not (data_dir / "commitlog").is_dir():
        raise StorageError(f"{data_dir} has no commitlog/ directory")
    layout = read_layout(data_dir) or {}
    size = args.segment_size or layout.get("segment_size") \
        or segment_size_of(data_dir / "commitlog")
    return CommitLog(data_dir / "commitlog", size, readonly=True,
                     require_crc_tail=bool(layout.get("append_prop_crc", 0)))


def run(args: argparse.Namespace) -> int:
    try:
        log = _open(args)
    except (StorageError, ValueError, OSError) as exc:
        print(f"broker-lite inspect: {exc}", file=sys.stderr)
        return 2
    start = log.min_offset if args.start is None else args.start
    count = 0
    size = 0
    corruption: Corruption | None = None
    out = sys.stdout
    try:
        for entry in log.walk(start, end=1 << 62):
            if isinstance(entry, Corruption):
                corruption = entry
                break
            record = decode_record(entry.segment.buffer,
                                   entry.offset - entry.segment.start_offset, verified=True)
            try:
                line = record_json(record)
            except CorruptRecordError as exc:  # a flag it cannot read
                corruption = Corruption(entry.offset, str(exc).split(": ", 1)[-1],
                                        entry.segment.path.name)
                break
            count += 1
            size += entry.size
            if not args.verify:
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
            if args.limit is not None and count >= args.limit:
                break
    finally:
        log.close()
    if corruption is not None:
        print(f"corrupt record at offset {corruption.offset} (segment {corruption.segment}): "
              f"{corruption.reason}", file=sys.stderr)
        return 1
    if args.verify:
        print(f"ok: {count} records, {size} bytes verified from offset {start}", file=sys.stderr)
    return 0
