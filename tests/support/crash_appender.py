"""Child process for crash tests: append with sync flush, report each acknowledgement.

Usage: ``python crash_appender.py DATA_DIR FIRST_SEQ``. Prints ``SEQ OFFSET SIZE``
after ``put`` returns, i.e. after the record is durable. The parent kills it
with SIGKILL at a moment of its choosing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from broker_lite.storage import MessageStore, MessageToStore, StoreConfig


def crash_config(data_dir: Path) -> StoreConfig:
    return StoreConfig(data_dir=data_dir, flush="sync", segment_size=64 * 1024,
                       units_per_queue_file=64, index_slots=64, index_entries=256,
                       checkpoint_interval=0.05)


def crash_message(seq: int) -> MessageToStore:
    size = (seq * 7919) % 1500
    return MessageToStore(
        topic="Crash", queue_id=seq % 4, body=(b"%09d;" % seq) * (size // 10 + 1),
        properties={"TAGS": f"t{seq % 3}", "KEYS": f"key-{seq}", "UNIQ_KEY": f"uniq-{seq}"},
    )


def main() -> None:
    data_dir, first = Path(sys.argv[1]), int(sys.argv[2])
    store = MessageStore(crash_config(data_dir))
    out = sys.stdout
    seq = first
    while True:
        result = store.put(crash_message(seq))
        out.write(f"{seq} {result.physical_offset} {result.size}\n")
        out.flush()
        seq += 1


if __name__ == "__main__":
    main()
