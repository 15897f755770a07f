"""kill -9 a process appending with sync flush, many times; check DESIGN's storage promise.

After every crash: each acknowledged record is present and byte-identical,
nothing corrupt is served, and the consume queues and key index agree with the
log. The same data directory goes through every crash, so recovery of a log
that was itself recovered is covered too.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker_lite.storage import MessageStore, TxType
from tests.support.crash_appender import crash_config, crash_message

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

APPENDER = Path(__file__).resolve().parents[2] / "support" / "crash_appender.py"
CRASHES = 24


def _run_until_killed(data_dir: Path, first_seq: int, acks_wanted: int,
                      rng: random.Random, mode: str) -> dict[int, tuple[int, int]]:
    """Start the appender, read acknowledgements, SIGKILL it mid-stream."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, str(APPENDER), str(data_dir), str(first_seq),
                              mode],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                             start_new_session=True)
    assert child.stdout is not None
    acked: dict[int, tuple[int, int]] = {}
    try:
        for line in child.stdout:
            seq, offset, size = map(int, line.split())
            acked[seq] = (offset, size)
            if len(acked) >= acks_wanted:
                break
        # A random extra moment: let the child run on into its next writes.
        for _ in range(rng.randrange(0, 3)):
            child.stdout.readline()
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
    assert acked, "the appender acknowledged nothing before it was killed"
    return acked


def _check(store: MessageStore, acked: dict[int, tuple[int, int]]) -> None:
    for seq, (offset, size) in acked.items():
        record = store.get(offset)  # CRC-checked read
        expected = crash_message(seq)
        assert record.body == expected.body
        assert record.properties == dict(expected.properties)
        assert record.total_size == size
    records = list(store.scan())  # raises on any corrupt record
    per_queue: dict[int, list[int]] = {}
    for record in records:
        assert record.tx_type == TxType.NOT_TYPE
        per_queue.setdefault(record.queue_id, []).append(record.physical_offset)
        assert record.queue_offset == len(per_queue[record.queue_id]) - 1
    for queue_id, offsets in per_queue.items():
        units = store.queue_units("Crash", queue_id, 0, 1_000_000)
        assert [u.commitlog_offset for u in units] == offsets
    for record in random.Random(len(records)).sample(records, min(50, len(records))):
        assert [r.physical_offset for r in store.lookup_key(record.properties["UNIQ_KEY"])] == [
            record.physical_offset
        ]


@pytest.mark.parametrize("mode", ["one-by-one", "batches"])
def test_kill_nine_while_appending_never_loses_an_acknowledged_record(tmp_path: Path,
                                                                      mode: str) -> None:
    """``batches``: put_batch_nowait, one durability wait per batch (the native door's
    SEND_BATCH and END_TRANSACTION_BATCH in sync flush mode)."""
    rng = random.Random(20261122)
    data_dir = tmp_path / "crash"
    acked: dict[int, tuple[int, int]] = {}
    for crash in range(CRASHES):
        acked.update(_run_until_killed(data_dir, crash * 1_000_000, rng.randint(1, 400), rng,
                                       mode))
        store = MessageStore(crash_config(data_dir))
        try:
            assert store.recovery.crashed
            _check(store, acked)
        finally:
            store.close()
    segments = list((data_dir / "commitlog").iterdir())
    assert len(segments) > 3, "the crash runs should have rolled over several segments"
