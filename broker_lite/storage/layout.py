"""``meta.json``: the file sizes a data directory was created with.

Segment, queue-file and index-file sizes decide where every file starts, so
they are fixed when a directory is created; opening it with other sizes is
refused with an error naming the value it was created with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from broker_lite.errors import StorageError
from broker_lite.storage.config import StoreConfig

__all__ = ["LAYOUT_FILE", "check_layout", "read_layout"]

LAYOUT_FILE = "meta.json"
_LAYOUT_FIELDS = ("segment_size", "units_per_queue_file", "index_slots", "index_entries")


def read_layout(data_dir: Path) -> dict[str, int] | None:
    """The file sizes a data dir was created with (``meta.json``), if recorded."""
    try:
        raw = json.loads((Path(data_dir) / LAYOUT_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StorageError(f"{data_dir}/{LAYOUT_FILE} is unreadable: {exc}") from exc
    return {k: int(raw[k]) for k in _LAYOUT_FIELDS if k in raw}


def check_layout(root: Path, config: StoreConfig) -> None:
    """File sizes are fixed at creation: refuse to open with different ones."""
    wanted = {k: int(getattr(config, k)) for k in _LAYOUT_FIELDS}
    found = read_layout(root)
    if found is None:
        tmp = root / (LAYOUT_FILE + ".tmp")
        tmp.write_text(json.dumps({"format": 1, **wanted}, indent=2) + "\n")
        os.replace(tmp, root / LAYOUT_FILE)
        return
    for key, value in wanted.items():
        if key in found and found[key] != value:
            raise StorageError(
                f"{root} was created with {key}={found[key]}, but {value} was configured; "
                f"open it with {key}={found[key]}"
            )
