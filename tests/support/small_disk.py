"""A tiny tmpfs mounted for one test: a real disk that really fills up (root only)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """Mount a ``size`` tmpfs at ``mount_point``; skip (fail under CI) when that is refused."""
    mount_point.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                           str(mount_point)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"cannot mount tmpfs: {done.stderr.strip()}")
        pytest.skip(f"cannot mount tmpfs: {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(directory: Path) -> Path:
    """Write a filler file in ``directory`` until the disk has no byte left; return it."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with filler.open("wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        try:  # the last partial page
            while True:
                out.write(b"\0")
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
    return filler
