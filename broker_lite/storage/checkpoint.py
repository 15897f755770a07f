"""The checkpoint file and the abort marker.

``checkpoint`` records how far the commit log is durable and how far the
consume queues and key index are known to be complete. It is replaced
atomically (write, fsync, rename) and carries its own CRC, so a torn write is
read as "no checkpoint" rather than as wrong numbers.

``abort`` exists while a store is open. Finding it at start means the last run
did not close cleanly, and recovery re-validates everything after the
checkpoint.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AbortMarker", "Checkpoint", "read_checkpoint", "write_checkpoint"]

_MAGIC = b"RBCP"
_LAYOUT = struct.Struct(">4sHqqqq")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a clean or periodic checkpoint knows."""

    log_flushed_offset: int
    dispatched_offset: int
    log_min_offset: int
    timestamp_ms: int


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    body = _LAYOUT.pack(_MAGIC, 1, checkpoint.log_flushed_offset, checkpoint.dispatched_offset,
                        checkpoint.log_min_offset, checkpoint.timestamp_ms)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, body + _CRC.pack(zlib.crc32(body)))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint, or ``None`` if absent or damaged."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) != _LAYOUT.size + _CRC.size:
        return None
    body = data[: _LAYOUT.size]
    if _CRC.unpack(data[_LAYOUT.size :])[0] != zlib.crc32(body):
        return None
    magic, _version, flushed, dispatched, min_offset, ts = _LAYOUT.unpack(body)
    if magic != _MAGIC:
        return None
    return Checkpoint(flushed, dispatched, min_offset, ts)


class AbortMarker:
    """The ``abort`` file: present while the store is open."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def found(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        self.path.write_bytes(str(os.getpid()).encode())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
