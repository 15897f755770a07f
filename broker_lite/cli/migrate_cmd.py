"""``broker-lite migrate-store``: rewrite an old (format-1) data directory in format 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from broker_lite.errors import DiskFullError, StorageError
from broker_lite.storage.migrate import migrate_store

__all__ = ["register", "run"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "migrate-store",
        help="rewrite a format-1 data directory in RocketMQ 5's format (format 2)",
        description=(
            "Read a data directory written by broker_lite before its commit log became "
            "RocketMQ 5's byte layout (meta.json format 1) and write every record, in order "
            "and with its store timestamp, into a new directory in format 2, with "
            "transactions in RocketMQ's model. Queue offsets of user topics, consumer "
            "offsets and the other state files carry over. The old directory is not changed; "
            "stop the broker first and start it on the new directory."
        ),
    )
    p.add_argument("--data-dir", required=True, type=Path, help="the old data directory")
    p.add_argument("--to", required=True, type=Path, metavar="NEW_DIR",
                   help="a new, empty directory")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        report = migrate_store(args.data_dir, args.to)
    except (StorageError, DiskFullError, OSError) as exc:
        print(f"broker-lite migrate-store: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"records": report.records, "bytes_read": report.bytes_read,
                      "stopped_at": report.stopped_at, "to": str(args.to)}))
    if report.stopped_at:
        print(f"broker-lite migrate-store: the old log stops being sound at "
              f"{report.stopped_at}; everything before it was migrated", file=sys.stderr)
    return 0
