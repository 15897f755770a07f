"""Small JSON state files (topics, offsets, delay progress), replaced atomically, 0600."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from broker_lite.storage.private import write_private

__all__ = ["load_json", "save_json"]

log = logging.getLogger("broker_lite.core")


def load_json(path: Path) -> Any:
    """The file's JSON, or ``None`` when absent. A damaged file is an error, named."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}); restore it or delete it") from exc


def save_json(path: Path, data: Any) -> bool:
    """Write via a temp file and rename. On OSError (full disk) log and keep the old file."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        text = json.dumps(data, separators=(",", ":"), sort_keys=True)
        write_private(tmp, text.encode(), sync=True)
        os.replace(tmp, path)
    except OSError as exc:
        log.error("could not save %s: %s (the previous version is kept)", path, exc)
        tmp.unlink(missing_ok=True)
        return False
    return True
