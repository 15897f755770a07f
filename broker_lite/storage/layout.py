"""``meta.json``: the store format and the file sizes a data directory was created with.

Segment, queue-file and index-file sizes decide where every file starts, and
``append_prop_crc`` whether every record carries the ``__CRC32#`` tail, so they
are fixed when a directory is created; opening it with other values is
refused with an error naming the value it was created with.

``format`` is the commit-log format: 2 is RocketMQ 5's record layout and
transaction model. A directory of format 1 (broker_lite before it wrote
RocketMQ's layout; also a directory with segments but no ``meta.json``) is
refused with a message naming ``broker-lite migrate-store``, which rewrites it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from broker_lite.errors import StorageError
from broker_lite.storage.config import StoreConfig
from broker_lite.storage.private import write_private

__all__ = ["FORMAT_VERSION", "LAYOUT_FILE", "check_layout", "read_layout", "write_layout"]

LAYOUT_FILE = "meta.json"
FORMAT_VERSION = 2
_LAYOUT_FIELDS = ("segment_size", "units_per_queue_file", "index_slots", "index_entries",
                  "append_prop_crc")


def read_layout(data_dir: Path) -> dict[str, int] | None:
    """The format and file sizes a data dir was created with (``meta.json``), if recorded."""
    try:
        raw = json.loads((Path(data_dir) / LAYOUT_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"{data_dir}/{LAYOUT_FILE} is unreadable: {exc}") from exc
    return {k: int(raw[k]) for k in ("format", *_LAYOUT_FIELDS) if k in raw}


def write_layout(root: Path, config: StoreConfig) -> None:
    """Write ``meta.json`` for a new directory (atomically)."""
    wanted: dict[str, Any] = {k: getattr(config, k) for k in _LAYOUT_FIELDS}
    tmp = root / (LAYOUT_FILE + ".tmp")
    write_private(tmp, (json.dumps({"format": FORMAT_VERSION, **wanted}, indent=2)
                        + "\n").encode())
    os.replace(tmp, root / LAYOUT_FILE)


def _has_segments(root: Path) -> bool:
    log_dir = root / "commitlog"
    return log_dir.is_dir() and any(p.stat().st_size for p in log_dir.glob("[0-9]" * 20))


def check_layout(root: Path, config: StoreConfig) -> None:
    """Sizes and format are fixed at creation: refuse to open with different ones."""
    found = read_layout(root)
    if found is None:
        if _has_segments(root):
            found = {"format": 1}
        else:
            write_layout(root, config)
            return
    version = found.get("format", 1)
    if version != FORMAT_VERSION:
        raise StorageError(
            f"{root} holds a format-{version} commit log; this broker_lite reads format "
            f"{FORMAT_VERSION} (RocketMQ 5's layout). Rewrite it first with: "
            f"broker-lite migrate-store --data-dir {root} --to NEW_DIR")
    for key in _LAYOUT_FIELDS:
        value = int(getattr(config, key))
        if key in found and found[key] != value:
            raise StorageError(
                f"{root} was created with {key}={found[key]}, but {value} was configured; "
                f"open it with {key}={found[key]}"
            )
