"""Memory-mapped, fixed-size files and the queue of them (RocketMQ's MappedFile).

A :class:`MappedFile` is one preallocated file mapped into memory. Writes are
memory copies into the page cache, so a record is "written to the OS" as soon
as it is copied, and survives the death of the process. ``flush`` makes it
durable with ``fdatasync``.

Space is reserved with ``posix_fallocate`` when the file is created, so a full
disk is reported then, as :class:`DiskFullError`, instead of as a ``SIGBUS``
on a later write into the mapping.

A :class:`MappedFileQueue` is a directory of such files, each named by the
20-digit offset of its first byte in one logical address space.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from pathlib import Path

from broker_lite.errors import DiskFullError, StorageError
from broker_lite.storage.private import open_private, private_dir

__all__ = ["MappedFile", "MappedFileQueue", "reserve_space", "segment_name"]


def segment_name(offset: int) -> str:
    """The 20-digit, zero-padded file name RocketMQ gives a segment."""
    return f"{offset:020d}"


def reserve_space(fd: int, size: int, path: Path) -> None:
    """Allocate ``size`` bytes for real, so later writes cannot run out of disk."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DiskFullError("no space left to preallocate a segment", path=str(path)) from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise StorageError(f"cannot preallocate {path}: {exc}") from exc
        os.ftruncate(fd, size)


class MappedFile:
    """One fixed-size file, mapped read-write. Not thread-safe on its own."""

    __slots__ = ("_fd", "_mm", "file_size", "flushed_position", "path", "readonly",
                 "start_offset", "wrote_position")

    def __init__(self, path: Path, file_size: int, start_offset: int, *,
                 readonly: bool = False) -> None:
        self.path = path
        self.file_size = file_size
        self.start_offset = start_offset
        self.readonly = readonly
        self.wrote_position = 0
        self.flushed_position = 0
        if readonly:
            # Map what is there, never more: inspecting must not change a byte.
            fd = os.open(path, os.O_RDONLY)
            try:
                size = min(os.fstat(fd).st_size, file_size)
                self._mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
            finally:
                os.close(fd)
            self._fd = -1
            return
        existed = path.exists()
        fd = open_private(path, os.O_RDWR)
        try:
            current = os.fstat(fd).st_size
            if not existed or current < file_size:
                # A new file, or one whose tail was cut off: reserve the rest.
                reserve_space(fd, file_size, path)
            self._mm = mmap.mmap(fd, file_size)
        except BaseException:
            os.close(fd)
            if not existed:
                path.unlink(missing_ok=True)
            raise
        self._fd = fd

    @property
    def end_offset(self) -> int:
        return self.start_offset + self.file_size

    @property
    def buffer(self) -> mmap.mmap | bytes:
        """The mapping itself, for zero-copy reads by the codec."""
        return self._mm if self._mm is not None else b""

    @property
    def limit(self) -> int:
        """How many bytes can be read: the file size, less in a read-only torn file."""
        return len(self._mm) if self._mm is not None else 0

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def writable(self) -> mmap.mmap:
        """The mapping, for writing in place; raises if the file is read-only."""
        if self._mm is None or self.readonly:
            raise StorageError(f"{self.path} is open read-only")
        return self._mm

    def write(self, data: bytes) -> int:
        """Copy ``data`` at the write position; return the position it went to."""
        pos = self.wrote_position
        end = pos + len(data)
        mm = self._mm
        if mm is None or self.readonly:
            raise StorageError(f"{self.path} is open read-only")
        mm[pos:end] = data
        self.wrote_position = end
        return pos

    def write_at(self, data: bytes | bytearray | memoryview, pos: int) -> None:
        """Copy ``data`` to ``pos`` with ``pwrite``, not through the mapping (which sees it:
        both are the page cache); the write position is the caller's to move.

        No page of the mapping is touched, so the copy takes no page fault: the
        kernel copies into the page cache, with the GIL released. A refusal
        (``ENOSPC`` converting a preallocated extent, an I/O error) is raised as
        :class:`DiskFullError` or :class:`StorageError`; bytes it may have left
        past the write position are not published, and recovery never counts them.
        """
        if self._fd < 0 or self.readonly:
            raise StorageError(f"{self.path} is open read-only")
        if pos + len(data) > self.file_size:
            raise StorageError(f"{len(data)} bytes at {pos} run past the end of {self.path}")
        view = memoryview(data)
        try:
            while view:
                written = os.pwrite(self._fd, view, pos)
                view = view[written:]
                pos += written
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError("no space left writing a segment",
                                    path=str(self.path)) from exc
            raise StorageError(f"cannot write {self.path}: {exc}") from exc

    def read(self, pos: int, size: int) -> bytes:
        return bytes(self.buffer[pos : pos + size])

    def flush(self) -> int:
        """``fdatasync`` the file; return the position now durable."""
        pos = self.wrote_position
        if pos > self.flushed_position and self._fd >= 0:
            try:
                os.fdatasync(self._fd)
            except OSError as exc:
                if self._fd >= 0:  # not a race with close() by retention
                    raise StorageError(f"fdatasync of {self.path} failed: {exc}") from exc
            self.flushed_position = pos
        return pos

    def sync(self) -> None:
        """``fdatasync`` unconditionally (for files written in place, not appended)."""
        os.fdatasync(self._fd)

    def zero_from(self, pos: int, end: int | None = None) -> None:
        """Wipe everything from ``pos`` to ``end`` (default: the end of the file; recovery
        truncation, and a batch whose ``pwrite`` failed part way)."""
        mm = self.writable()
        chunk = 1 << 20
        zeros = bytes(chunk)
        at = pos
        stop = self.file_size if end is None else min(end, self.file_size)
        while at < stop:
            n = min(chunk, stop - at)
            if mm[at : at + n] != zeros[:n]:
                mm[at : at + n] = zeros[:n]
            at += n
        self.wrote_position = min(self.wrote_position, pos)
        self.flushed_position = min(self.flushed_position, pos)

    def close(self) -> None:
        if self._mm is not None:
            # A reader may still hold a view; the mapping is then freed with it.
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class MappedFileQueue:
    """A directory of equal-size mapped files covering one address space."""

    def __init__(self, directory: Path, file_size: int, *, readonly: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        self.readonly = readonly
        if not readonly:
            private_dir(directory)
        self.files: list[MappedFile] = []
        names = sorted(os.listdir(directory)) if directory.exists() else []
        for name in names:
            if len(name) == 20 and name.isdigit():
                self.files.append(
                    MappedFile(directory / name, file_size, int(name), readonly=readonly)
                )
        for prev, nxt in zip(self.files, self.files[1:], strict=False):
            if prev.end_offset != nxt.start_offset:
                raise StorageError(
                    f"segment gap in {directory}: {prev.path.name} does not end where "
                    f"{nxt.path.name} starts (is the segment size {file_size} right?)"
                )

    @property
    def min_offset(self) -> int:
        return self.files[0].start_offset if self.files else 0

    def last_file(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def new_file(self, start_offset: int) -> MappedFile:
        mf = MappedFile(self.directory / segment_name(start_offset), self.file_size, start_offset)
        self.files.append(mf)
        return mf

    def find(self, offset: int) -> MappedFile | None:
        """The file holding ``offset``, or ``None`` when outside every file."""
        files = self.files
        if not files or offset < files[0].start_offset:
            return None
        index = (offset - files[0].start_offset) // self.file_size
        if index >= len(files):
            return None
        mf = files[index]
        return mf if mf.start_offset <= offset < mf.end_offset else None

    def truncate_from(self, offset: int) -> None:
        """Drop everything at and after ``offset``: later files go, the holder is wiped."""
        keep: list[MappedFile] = []
        for mf in self.files:
            if mf.start_offset >= offset:
                mf.destroy()
                continue
            if mf.end_offset > offset:
                mf.zero_from(offset - mf.start_offset)
            keep.append(mf)
        self.files = keep

    def delete_first(self) -> MappedFile:
        mf = self.files.pop(0)
        mf.destroy()
        return mf

    def flush(self) -> None:
        for mf in self.files:
            if mf.wrote_position > mf.flushed_position:
                mf.flush()

    def close(self) -> None:
        for mf in self.files:
            mf.close()
