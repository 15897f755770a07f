"""Torn tails and flipped bytes: recovery keeps exactly the sound prefix of the log.

Each case writes records, closes the store, damages the last segment the way a
crash or a bad disk would, marks the run as crashed (the ``abort`` file), and
checks that

* ``inspect --verify`` names the first damaged record before recovery runs;
* reopening keeps every record before it, byte for byte, and nothing after;
* consume queues and the key index agree with the log afterwards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from broker_lite.cli import main as cli_main
from broker_lite.storage import MessageStore
from tests.broker_lite.storage.storage_support import message_for, tiny_config

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Written:
    seq: int
    offset: int
    size: int
    raw: bytes


def _write(data_dir: Path, count: int) -> list[Written]:
    written: list[Written] = []
    with MessageStore(tiny_config(data_dir)) as store:
        for seq in range(count):
            result = store.put(message_for(seq))
            written.append(Written(seq, result.physical_offset, result.size,
                                   store.get_raw(result.physical_offset, result.size)))
    (data_dir / "abort").write_text("crashed")
    return written


def _last_segment(data_dir: Path) -> Path:
    return sorted((data_dir / "commitlog").iterdir())[-1]


class ToDamage(NamedTuple):
    """150 records written to ``data_dir``, the last segment to damage and what it holds."""

    data_dir: Path
    written: list[Written]
    segment: Path
    start: int  # the segment's first offset
    in_last: list[Written]


def _write_150(tmp_path: Path) -> ToDamage:
    data_dir = tmp_path / "s"
    written = _write(data_dir, 150)
    segment = _last_segment(data_dir)
    start = int(segment.name)
    return ToDamage(data_dir, written, segment, start, [w for w in written if w.offset >= start])


def assert_consistent(store: MessageStore, expected: list[Written]) -> None:
    """The log holds exactly ``expected``; queues and the key index agree with it."""
    assert store.max_offset == (expected[-1].offset + expected[-1].size if expected else 0)
    scanned = list(store.scan())
    assert [r.physical_offset for r in scanned] == [w.offset for w in expected]
    for w in expected:
        assert store.get_raw(w.offset, w.size) == w.raw
    per_queue: dict[int, list[int]] = {}
    for record in scanned:
        per_queue.setdefault(record.queue_id, []).append(record.physical_offset)
    for queue_id in range(3):
        records, _ = store.read_queue("Orders", queue_id, 0, 10_000)
        assert [r.physical_offset for r in records] == per_queue.get(queue_id, [])
        assert store.queue_offsets("Orders", queue_id)[1] == len(per_queue.get(queue_id, []))
    kept = {w.seq for w in expected}
    for seq in random.Random(7).sample(range(len(expected) + 40), 40):
        found = [r.physical_offset for r in store.lookup_key(f"u{seq}")]
        assert found == ([expected[seq].offset] if seq in kept else [])


def _verify_cli(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli_main(["inspect", "--data-dir", str(data_dir), "--verify"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("trial", range(12))
def test_truncated_tail_recovers_to_last_valid_record(
    tmp_path: Path, trial: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(1000 + trial)
    data_dir, written, segment, start, in_last = _write_150(tmp_path)
    end_of_data = in_last[-1].offset + in_last[-1].size - start
    cut = rng.randrange(0, end_of_data)
    with segment.open("r+b") as fh:
        fh.truncate(cut)
    survivors = [w for w in written if w.offset + w.size <= start + cut]
    first_lost = next(w for w in written if w.offset + w.size > start + cut)

    code, err = _verify_cli(data_dir, capsys)
    if cut != first_lost.offset - start or cut == 0:
        assert code == 1
        assert f"offset {first_lost.offset}" in err

    with MessageStore(tiny_config(data_dir)) as store:
        assert store.recovery.crashed
        assert_consistent(store, survivors)
        again = store.put(message_for(first_lost.seq))
        assert again.physical_offset == first_lost.offset


@pytest.mark.parametrize("trial", range(12))
def test_flipped_bytes_in_last_records_recover_to_last_valid_record(
    tmp_path: Path, trial: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(2000 + trial)
    data_dir, written, segment, start, in_last = _write_150(tmp_path)
    victims = sorted(rng.sample(in_last[-4:], k=min(len(in_last[-4:]), rng.randint(1, 2))),
                     key=lambda w: w.offset)
    with segment.open("r+b") as fh:
        for victim in victims:
            at = victim.offset - start + rng.randrange(victim.size)
            fh.seek(at)
            old = fh.read(1)[0]
            fh.seek(at)
            fh.write(bytes([old ^ rng.randint(1, 255)]))
    first_bad = victims[0]

    code, err = _verify_cli(data_dir, capsys)
    assert code == 1
    assert f"offset {first_bad.offset}" in err

    with MessageStore(tiny_config(data_dir)) as store:
        assert store.recovery.corruption is not None
        assert store.recovery.corruption.offset == first_bad.offset
        assert_consistent(store, [w for w in written if w.offset < first_bad.offset])


def test_inspect_prints_every_record_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "s"
    written = _write(data_dir, 40)
    before = {p: p.read_bytes() for p in (data_dir / "commitlog").iterdir()}
    capsys.readouterr()
    assert cli_main(["inspect", "--data-dir", str(data_dir), "--from", str(written[5].offset),
                     "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    import json

    rows = [json.loads(line) for line in lines]
    assert [r["offset"] for r in rows] == [w.offset for w in written[5:8]]
    assert rows[0]["keys"] == "k5 shared" and rows[0]["tag"] == "odd"
    assert rows[0]["sysflag"] == "normal" and rows[0]["body_length"] > 0
    assert {p: p.read_bytes() for p in (data_dir / "commitlog").iterdir()} == before


def test_inspect_on_missing_dir_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["inspect", "--data-dir", str(tmp_path / "nope")]) == 2
    assert "no commitlog" in capsys.readouterr().err
