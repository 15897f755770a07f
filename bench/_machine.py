"""The machine a benchmark ran on, as its results describe it.

CPU, cores, memory, the filesystem holding the data, the kernel and Python
(:func:`describe_machine`), a one-line summary for tables
(:func:`machine_summary`), and the load averages (:func:`load_average`).
:mod:`_common` re-exports these names.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = ["describe_machine", "filesystem_of", "load_average", "machine_summary"]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def filesystem_of(path: Path) -> dict[str, str]:
    """Mount point, filesystem type, device and options of the mount holding ``path``.

    Reads ``/proc/self/mountinfo`` and picks the longest mount point that is a
    prefix of the resolved path. Empty values when that file is unreadable.
    """
    target = path.resolve()
    best: dict[str, str] = {"mount_point": "", "fstype": "", "device": "", "options": ""}
    best_len = -1
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return best
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        mount_point = fields[4].encode().decode("unicode_escape")
        if not target.is_relative_to(mount_point) or len(mount_point) <= best_len:
            continue
        fstype, device, *rest = right.split()
        best = {
            "mount_point": mount_point,
            "fstype": fstype,
            "device": device,
            "options": fields[5] + ("," + rest[0] if rest else ""),
        }
        best_len = len(mount_point)
    return best


def describe_machine(data_dir: Path) -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPU, cores, memory, disk, Python."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 0
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable,
        "memory_bytes": _memory_bytes(),
        "kernel": platform.release(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_executable": sys.executable,
        "data_dir": str(data_dir),
        "data_dir_filesystem": filesystem_of(data_dir),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages: other work on the machine skews the numbers."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def machine_summary(machine: dict[str, Any]) -> str:
    """One line naming the machine, for tables and the README."""
    mem = machine.get("memory_bytes")
    mem_text = f"{mem / 2**30:.0f} GiB RAM" if mem else "unknown RAM"
    fs = machine.get("data_dir_filesystem", {})
    return (
        f"{machine['cpu_model']}, {machine['cpus_usable']} usable cores, {mem_text}, "
        f"data on {fs.get('fstype') or '?'} ({fs.get('device') or '?'}), "
        f"Linux {machine['kernel']}, {machine['python_implementation']} {machine['python']}"
    )
