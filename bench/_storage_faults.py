"""Page faults of the batch append path, per 1,000 records (issue 31).

Appends batches of 64 records of 1 KiB (a ``UNIQ_KEY`` each, so every record
also writes a queue unit and a key-index entry) with
``MessageStore.put_batch_nowait`` into a fresh store, in ``sync`` mode (each
batch waits for its ``fdatasync``, as the broker's ``SEND_BATCH`` does) and in
``async`` mode, and prints the minor page faults of the appending thread
(``getrusage(RUSAGE_THREAD)``) per 1,000 records, its CPU microseconds per
record and the records per second. Run it against another tree by putting that
tree's ``broker_lite`` first on ``PYTHONPATH``::

    python bench/_storage_faults.py [--records N] [--repeat K]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _common import add_repository_paths

add_repository_paths()

from broker_lite.storage import MessageStore, MessageToStore, PutResult, StoreConfig  # noqa: E402

__all__ = ["measure_faults"]

BATCH = 64
BODY = os.urandom(1024)


def _batch(start: int) -> list[MessageToStore]:
    return [MessageToStore(topic="BenchFaults", body=BODY, queue_id=0,
                           properties={"UNIQ_KEY": f"{seq:032X}"})
            for seq in range(start, start + BATCH)]


def measure_faults(root: Path, flush: str, records: int) -> tuple[float, float, float]:
    """``(faults per 1,000 records, CPU us per record, records/s)`` of one fresh run."""
    data_dir = Path(tempfile.mkdtemp(dir=root))
    batches = [_batch(start) for start in range(0, records, BATCH)]
    try:
        with MessageStore(StoreConfig(data_dir=data_dir, flush=flush)) as store:  # type: ignore[arg-type]
            store.put_batch_nowait(_batch(-BATCH))  # the segment and the queue exist
            before = resource.getrusage(resource.RUSAGE_THREAD)
            started = time.perf_counter()
            for batch in batches:
                results = store.put_batch_nowait(batch)
                last = results[-1]
                if not isinstance(last, PutResult):
                    raise RuntimeError(f"a record was refused: {last}")
                if flush == "sync" and not store.wait_flushed(last.end_offset, 30):
                    raise RuntimeError("fdatasync did not come within 30 s")
            seconds = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    done = len(batches) * BATCH
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return ((after.ru_minflt - before.ru_minflt) * 1000 / done, cpu / done * 1e6,
            done / seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=32_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent / "results" / "tmp" / "faults"
    root.mkdir(parents=True, exist_ok=True)
    import broker_lite
    print(f"broker_lite from {Path(broker_lite.__file__).parent}; batches of {BATCH} x 1 KiB; "
          f"medians of {args.repeat}")
    for flush in ("sync", "async"):
        runs = [measure_faults(root, flush, args.records) for _ in range(args.repeat)]
        faults, cpu, rate = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{flush:5s}: {faults:6.0f} minor faults / 1,000 records, "
              f"{cpu:5.2f} CPU us / record (appending thread), {rate:9,.0f} records/s")


if __name__ == "__main__":
    main()
