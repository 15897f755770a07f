"""The checkpoint file and the abort marker.

``checkpoint`` records how far the commit log is durable and how far the
consume queues and key index are known to be complete. The file is
preallocated once with two 64-byte slots, and each checkpoint overwrites the
older slot in place and fsyncs it. Every slot carries a sequence number and a
CRC, and the reader takes the newest sound one. So a torn write leaves the
previous checkpoint readable, and writing a checkpoint never needs a new disk
block, which keeps it working on a full disk.

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

from broker_lite.storage.mapped_file import reserve_space
from broker_lite.storage.private import open_private, write_private

__all__ = ["AbortMarker", "Checkpoint", "CheckpointFile"]

_MAGIC = b"RBCP"
_SLOT = struct.Struct(">4sHqqqqq")  # magic, version, sequence, then the four offsets
_CRC = struct.Struct(">I")
SLOT_SIZE = 64


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a clean or periodic checkpoint knows."""

    log_flushed_offset: int
    dispatched_offset: int
    log_min_offset: int
    timestamp_ms: int


class CheckpointFile:
    """Two preallocated slots, written alternately in place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sequence = 0
        self.last = self._read()
        # Allocate both slots now, while there is room, so that writing a
        # checkpoint later never needs a new block.
        fd = open_private(self.path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size < 2 * SLOT_SIZE:
                reserve_space(fd, 2 * SLOT_SIZE, self.path)
        finally:
            os.close(fd)

    def _read(self) -> Checkpoint | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        best: tuple[int, Checkpoint] | None = None
        for at in (0, SLOT_SIZE):
            slot = data[at : at + _SLOT.size + _CRC.size]
            if len(slot) < _SLOT.size + _CRC.size:
                continue
            body = slot[: _SLOT.size]
            if _CRC.unpack(slot[_SLOT.size :])[0] != zlib.crc32(body):
                continue
            magic, _version, seq, flushed, dispatched, min_offset, ts = _SLOT.unpack(body)
            if magic == _MAGIC and (best is None or seq > best[0]):
                best = (seq, Checkpoint(flushed, dispatched, min_offset, ts))
        if best is None:
            return None
        self._sequence = best[0]
        return best[1]

    def write(self, checkpoint: Checkpoint) -> None:
        self._sequence += 1
        body = _SLOT.pack(_MAGIC, 1, self._sequence, checkpoint.log_flushed_offset,
                          checkpoint.dispatched_offset, checkpoint.log_min_offset,
                          checkpoint.timestamp_ms)
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.pwrite(fd, body + _CRC.pack(zlib.crc32(body)), (self._sequence % 2) * SLOT_SIZE)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.last = checkpoint


class AbortMarker:
    """The ``abort`` file: present while the store is open."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def found(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        write_private(self.path, str(os.getpid()).encode())

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
