"""Segment decoding on its own (no Spark): what leaves a task, and how damage is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.segments import PROBLEM, RECORD_FIELDS, decode_segment, decode_split
from tests.spark.audit_seed import broker_seed

pytestmark = pytest.mark.spark


def _rows(path: Path) -> list[dict[str, object]]:
    return [dict(zip(RECORD_FIELDS, row, strict=True))
            for row in decode_segment(str(path), path.read_bytes())]


@pytest.mark.timeout(30)
def test_segment_rows_mirror_the_transaction_records(tmp_path: Path) -> None:
    with broker_seed(tmp_path / "b") as seed:
        seed.normal("Plain", b"skipped")  # not transactional: never leaves the task
        half = seed.half("T1", "Orders", b"body").put
        commit = seed.commit("T1")
        seed.half("T2", "Orders", b"x")
        seed.discard("T2")
    (segment,) = sorted((tmp_path / "b" / "commitlog").iterdir())
    rows = _rows(segment)
    kinds = [(r["kind"], r["tx_id"], r["tx_state"], r["check_times"]) for r in rows]
    assert kinds == [("half", "T1", "", 0), ("commit", "T1", "", 0), ("op", "T1", "COMMIT", 0),
                     ("half", "T2", "", 0), ("half", "T2", "", 1), ("half", "T2", "", 2),
                     ("discard", "T2", "", 2)]
    assert rows[2]["op_offsets"] == str(rows[0]["queue_offset"]) == "0"
    assert [r["queue_offset"] for r in rows if r["kind"] == "half"] == [0, 1, 2, 3]
    assert rows[0]["offset"] == half.physical_offset and rows[0]["real_topic"] == "Orders"
    assert rows[1]["offset"] == commit.physical_offset
    assert rows[1]["prepared_offset"] == half.physical_offset
    assert rows[1]["topic"] == "Orders" and rows[1]["sysflag"] == "commit"
    assert rows[0]["body_sha256"] == rows[1]["body_sha256"]


@pytest.mark.timeout(30)
def test_segment_garbage_in_the_middle_is_skipped_to_the_next_record(tmp_path: Path) -> None:
    with broker_seed(tmp_path / "b") as seed:
        puts = [seed.half(f"T{i}", "Orders", b"y" * 40).put for i in range(5)]
    (segment,) = sorted((tmp_path / "b" / "commitlog").iterdir())
    data = bytearray(segment.read_bytes())
    data[puts[2].physical_offset + 4] ^= 0x55  # the magic code of the third record
    rows = [dict(zip(RECORD_FIELDS, r, strict=True))
            for r in decode_segment(str(segment), bytes(data))]
    problems = [(r["offset"], r["detail"]) for r in rows if r["kind"] == PROBLEM]
    assert len(problems) == 1 and problems[0][0] == puts[2].physical_offset
    assert str(problems[0][1]).startswith("bad magic code")
    assert [r["tx_id"] for r in rows if r["kind"] == "half"] == ["T0", "T1", "T3", "T4"]


@pytest.mark.timeout(30)
def test_segment_name_must_be_an_offset() -> None:
    (row,) = decode_segment("/x/notes.txt", b"\0" * 64)
    assert row[0] == PROBLEM and "20 digits" in str(row[RECORD_FIELDS.index("detail")])


def _in_splits(path: Path, data: bytes, split: int) -> list[tuple[object, ...]]:
    def fetch(position: int, length: int) -> bytes:
        return data[position : position + length]
    rows: list[tuple[object, ...]] = []
    for lo in range(0, len(data), split):
        rows += decode_split(str(path), fetch, len(data), lo, min(lo + split, len(data)))
    return rows


@pytest.mark.timeout(60)
@pytest.mark.parametrize("split", [97, 500, 1499, 8192])
def test_splits_decode_each_record_once_and_each_problem_once(tmp_path: Path,
                                                              split: int) -> None:
    """Records straddle split boundaries; a task starts at its first anchored record."""
    with broker_seed(tmp_path / "b", segment_size=8192) as seed:
        puts = []
        for i in range(60):
            puts.append(seed.half(f"T{i}", "Orders", b"x" * (i * 7 % 90)).put)
            if i % 3:
                seed.commit(f"T{i}")
    segments = sorted((tmp_path / "b" / "commitlog").iterdir())
    for path in segments:
        data = path.read_bytes()
        assert _in_splits(path, data, split) == list(decode_segment(str(path), data))
    victim = puts[7]
    path = segments[0]
    data = bytearray(path.read_bytes())
    data[victim.physical_offset + 30] ^= 0x08  # its physical-offset field: the anchor breaks
    rows = _in_splits(path, bytes(data), split)
    problems = [r for r in rows if r[0] == PROBLEM]
    assert [(r[2], r[RECORD_FIELDS.index("detail")]) for r in problems] == [
        (victim.physical_offset, "record CRC mismatch")]
    assert len(rows) == len(list(decode_segment(str(path), path.read_bytes())))


def test_hadoop_object_store_uris_are_read_under_pyarrows_names() -> None:
    from spark.segments import pyarrow_uri

    assert pyarrow_uri("s3a://bucket/broker-a/commitlog/00000000000000000000") == \
        "s3://bucket/broker-a/commitlog/00000000000000000000"
    assert pyarrow_uri("S3N://b/k") == "s3://b/k"
    assert pyarrow_uri("file:///srv/store/commitlog/x") == "file:///srv/store/commitlog/x"
    assert pyarrow_uri("/srv/store/commitlog/x") == "/srv/store/commitlog/x"
