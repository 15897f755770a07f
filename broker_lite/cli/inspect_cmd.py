"""``broker-lite inspect``: offline, read-only dump and check of a commit log."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from broker_lite.errors import StorageError
from broker_lite.storage.commitlog import CommitLog, Corruption
from broker_lite.storage.layout import read_layout
from broker_lite.storage.properties import KEYS, TAGS, TRANSACTION_ID, UNIQ_KEY
from broker_lite.storage.record import StoredRecord, decode_record, sysflag_name

__all__ = ["record_json", "register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "inspect",
        help="print every commit-log record as a JSON line (offline, read-only)",
        description=(
            "Read a broker_lite data directory without changing it and print one JSON line "
            "per commit-log record, half and op records included. Every record's CRCs are "
            "checked; with --verify the command exits 1 at the first corrupt record and "
            "names its offset on stderr."
        ),
    )
    p.add_argument("--data-dir", required=True, type=Path, help="the broker's data directory")
    p.add_argument("--verify", action="store_true",
                   help="print nothing per record; check every CRC and exit 1 on corruption")
    p.add_argument("--from", dest="start", type=int, default=None, metavar="OFFSET",
                   help="start at this physical offset (a record boundary)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--segment-size", type=int, default=None,
                   help="segment size in bytes (read from meta.json when omitted)")
    p.set_defaults(handler=run)


def record_json(record: StoredRecord) -> dict[str, Any]:
    props = record.properties
    return {
        "offset": record.physical_offset,
        "size": record.total_size,
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "sysflag": sysflag_name(record.sysflag),
        "transaction_id": props.get(TRANSACTION_ID) or props.get(UNIQ_KEY),
        "keys": props.get(KEYS, ""),
        "tag": props.get(TAGS),
        "store_timestamp": record.store_timestamp,
        "born_timestamp": record.born_timestamp,
        "prepared_tx_offset": record.prepared_tx_offset,
        "reconsume_times": record.reconsume_times,
        "properties": props,
        "body_length": len(record.body),
        "body_crc": record.body_crc,
    }


def _segment_size(data_dir: Path, given: int | None) -> int:
    if given:
        return given
    layout = read_layout(data_dir)
    if layout and "segment_size" in layout:
        return layout["segment_size"]
    segments = sorted((data_dir / "commitlog").glob("[0-9]" * 20))
    if len(segments) >= 2:
        return int(segments[1].name) - int(segments[0].name)
    if segments:
        return segments[0].stat().st_size
    raise StorageError(f"{data_dir} has no commit log and no meta.json")


def run(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir
    if not (data_dir / "commitlog").is_dir():
        print(f"broker-lite inspect: {data_dir} has no commitlog/ directory", file=sys.stderr)
        return 2
    try:
        log = CommitLog(data_dir / "commitlog", _segment_size(data_dir, args.segment_size),
                        readonly=True)
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
            count += 1
            size += entry.size
            if not args.verify:
                record = decode_record(entry.segment.buffer,
                                       entry.offset - entry.segment.start_offset, verified=True)
                out.write(json.dumps(record_json(record), ensure_ascii=False) + "\n")
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
