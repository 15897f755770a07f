"""bench/storage.py ``--profile``: cProfile of the single-appender put loop and of recovery.

Only the loop and the crash-recovery open are profiled, in this thread
(cProfile sees the calling thread only); the functions with the most own
time are printed.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from _common import MB
from _storage_cases import SEGMENT_SIZE, console
from _storage_recovery import RecoveryLog, prepare_recovery, recovery_config

from broker_lite.storage import MessageStore, MessageToStore, StoreConfig

__all__ = ["profile", "run_profiles"]


def profile(label: str, fn: Callable[[], object], top: int = 18) -> None:
    """Run ``fn`` under cProfile and print the functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    console.rule(f"profile: {label} (total {total:.2f} s under cProfile)")
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in rows[:top]:
        where = f"{Path(file).name}:{line}" if line else file
        console.print(f"{100 * tottime / total:5.1f}%  own {tottime:6.3f}s  cum {cumtime:6.3f}s  "
                      f"{calls:>9}  {func}  ({where})", highlight=False)


def run_profiles(root: Path, log: RecoveryLog, messages: Sequence[MessageToStore]) -> None:
    """Profile the single-appender async put loop and the crash-recovery open.

    Only the loop and the open are profiled; opening and closing around them
    are not. cProfile sees the calling thread only, so both run in this one.
    """
    data_dir = root / "profile"
    store = MessageStore(StoreConfig(data_dir=data_dir, flush="async", segment_size=SEGMENT_SIZE))

    def puts() -> None:
        put = store.put
        for msg in messages:
            put(msg)

    try:
        profile(f"async put, 1 appender, {len(messages):,} records", puts)
    finally:
        store.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    prepare_recovery(log, cold=False)
    opened: list[MessageStore] = []
    profile(f"crash recovery of {log.log_bytes / MB:.0f} MB",
            lambda: opened.append(MessageStore(recovery_config(log.data_dir))))
    for store in opened:
        store.close()
