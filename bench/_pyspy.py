"""Sampling another Python process with py-spy, and reading where its time went.

:func:`record` runs ``py-spy record --format raw`` against a pid while a block
runs; :func:`read_raw` reads the folded stacks it wrote; :func:`by_function`
and :func:`by_layer` turn them into shares (own time and inclusive time per
function, and own time per *layer*: a path prefix such as
``broker_lite/storage/``). Shares are of the samples taken; with ``gil=True``
only samples of a thread holding the GIL count, which is the CPU the
interpreter spends (a thread in ``fdatasync`` or ``epoll_wait`` is not).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["by_function", "by_layer", "py_spy_path", "read_raw", "record"]

#: seconds py-spy gets to attach before the measured work starts
ATTACH_DELAY = 0.5
Stacks = Counter[tuple[str, ...]]


def py_spy_path() -> str:
    """The venv's py-spy if there is one, else whatever ``py-spy`` is on PATH."""
    exe = Path(sys.executable).with_name("py-spy")
    return str(exe) if exe.exists() else "py-spy"


@contextlib.contextmanager
def record(pid: int, output: Path, *, rate: int = 250, gil: bool = True) -> Iterator[None]:
    """Sample ``pid`` while the block runs; folded stacks go to ``output``.

    ``--nonblocking`` keeps py-spy from pausing the target at every sample.
    Raises ``RuntimeError`` if py-spy wrote nothing (not installed, or not
    allowed to attach).
    """
    output.unlink(missing_ok=True)
    argv = [py_spy_path(), "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
            "--output", str(output), "--nonblocking", *(["--gil"] if gil else [])]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(ATTACH_DELAY)  # no event to wait on: py-spy prints nothing when attached
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if not output.exists():
        raise RuntimeError(f"py-spy wrote nothing for pid {pid}: "
                           f"{err.decode(errors='replace')[-400:]}")


def read_raw(path: Path) -> Stacks:
    """py-spy's raw format: one ``frame;frame;... count`` line per stack, outermost first.

    A frame is ``function (path:line)``; the line number is dropped here, so
    stacks aggregate per function.
    """
    stacks: Stacks = Counter()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(_drop_line(f) for f in stack.split(";"))] += int(count)
    return stacks


def _drop_line(frame: str) -> str:
    name, sep, where = frame.partition(" (")
    return f"{name} ({where.rstrip(')').rsplit(':', 1)[0]})" if sep else name


def _where(frame: str) -> str:
    """The path of a frame (``""`` for frames without one)."""
    return frame.partition(" (")[2].rstrip(")")


def _own_frame(stack: tuple[str, ...]) -> str:
    """The innermost frame, skipping generated code (a dataclass ``__init__`` made by
    ``exec``, whose path is ``<string>``): its time belongs to whoever called it."""
    for frame in reversed(stack):
        if not _where(frame).startswith("<string"):
            return frame
    return stack[-1]


def by_function(stacks: Stacks, top: int) -> dict[str, Any]:
    """The ``top`` functions by own time and by inclusive time, as shares of all samples."""
    total = sum(stacks.values())
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        own[stack[-1]] += count
        for frame in set(stack):
            inclusive[frame] += count
    return {
        "samples": total,
        "own": [[f, c / total] for f, c in own.most_common(top)] if total else [],
        "inclusive": [[f, c / total] for f, c in inclusive.most_common(top)] if total else [],
    }


def by_layer(stacks: Stacks, layers: Sequence[tuple[str, Sequence[str]]]) -> list[list[Any]]:
    """Own time per layer: the first layer one of whose path prefixes matches the path
    of a sample's innermost frame (generated code counts for its caller). Samples no
    layer claims are ``other``. Returns ``[layer, share]`` rows, largest first."""
    total = sum(stacks.values())
    shares: Counter[str] = Counter()
    for stack, count in stacks.items():
        where = _where(_own_frame(stack))
        layer = next((name for name, prefixes in layers
                      if any(where.startswith(p) for p in prefixes)), "other")
        shares[layer] += count
    return [[name, c / total] for name, c in shares.most_common()] if total else []
