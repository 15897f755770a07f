"""Private files: the data directory is 0700 and every file in it 0600, whatever the umask.

The store holds message bodies (card numbers, private halves) and consumer
state; no other local user may read them. Every file the broker creates goes
through :func:`open_private` (or :func:`write_private`), every directory
through :func:`private_dir`. Each sets the mode explicitly with ``chmod`` after
creating, so the process umask (even ``000``) cannot widen it, and a file or
directory an older version left world-readable is narrowed when reopened.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "open_private", "private_dir", "write_private"]

#: owner read/write/search only
DIR_MODE = 0o700
#: owner read/write only
FILE_MODE = 0o600


def private_dir(path: Path) -> None:
    """Create ``path`` and any missing parents as 0700; narrow ``path`` itself to 0700.

    Parents that already existed keep their mode (the data dir may sit in a
    shared ``/tmp``); every directory made here is 0700.
    """
    missing: list[Path] = []
    at = path
    while not at.exists():
        missing.append(at)
        at = at.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by another thread meanwhile
            os.mkdir(directory, DIR_MODE)
        os.chmod(directory, DIR_MODE)
    os.chmod(path, DIR_MODE)


def open_private(path: Path, flags: int) -> int:
    """``os.open(path, flags)`` with ``O_CREAT``; the file is 0600 whatever the umask."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Replace ``path``'s content with ``data`` (truncating); the file is 0600."""
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
