"""Child process for crash tests: append with sync flush, report each acknowledgement.

Usage: ``python crash_appender.py DATA_DIR FIRST_SEQ [batches]``. Prints ``SEQ
OFFSET SIZE`` after ``put`` returns, i.e. after the record is durable. With
``batches`` it appends 1 to 16 records at a time with ``put_batch_nowait``, waits
once for the batch's last end offset to be durable, then prints every record
of the batch. The parent kills it with SIGKILL at a moment of its choosing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from broker_lite.storage import MessageStore, MessageToStore, PutResult, StoreConfig


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
    while len(sys.argv) > 3 and sys.argv[3] == "batches":
        msgs = [crash_message(s) for s in range(seq, seq + 1 + seq % 16)]
        puts = store.put_batch_nowait(msgs)
        if not all(isinstance(p, PutResult) for p in puts):
            raise SystemExit(f"a batch was refused: {puts}")
        if not store.wait_flushed(max(p.end_offset for p in puts if isinstance(p, PutResult)),
                                  timeout=30):
            raise SystemExit("no fsync within 30 s")
        for put in puts:
            assert isinstance(put, PutResult)
            out.write(f"{seq} {put.physical_offset} {put.size}\n")
            seq += 1
        out.flush()
    while True:
        result = store.put(crash_message(seq))
        out.write(f"{seq} {result.physical_offset} {result.size}\n")
        out.flush()
        seq += 1


if __name__ == "__main__":
    main()
