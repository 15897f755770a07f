"""``broker-lite inspect --commitlog DIR`` on segments built the way RocketMQ's broker does."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests.support import rocketmq_log as rmq

pytestmark = pytest.mark.timeout(60)


def _inspect(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker_lite", "inspect", *args],
                          capture_output=True, text=True, timeout=50)


def _rocket_dir(tmp_path: Path, *, crc_prop: bool = False) -> tuple[Path, list[rmq.Placed],
                                                                     list[rmq.Message]]:
    log = rmq.RocketLog(tmp_path / "store" / "commitlog", 8192, crc_prop=crc_prop)
    msgs = [rmq.Message("T" * 127, b"v1 body", {"UNIQ_KEY": "a", "TAGS": "t"}),
            rmq.Message("T" * 128, b"v2 body", {"UNIQ_KEY": "b"}),
            rmq.Message("Six", b"v6", {"KEYS": "k1 k2"}, born_host=("2001:db8::1", 7),
                        store_host=("::1", 10911)),
            rmq.Message("Zip", zlib.compress(b"plain " * 100), {}, sysflag=0x301)]
    msgs += [rmq.Message("Fill", b"f" * (300 + i), {"UNIQ_KEY": f"f{i}"}) for i in range(40)]
    placed = [log.put(msg) for msg in msgs]
    log.write()
    return tmp_path / "store" / "commitlog", placed, msgs


@pytest.mark.parametrize("crc_prop", [False, True], ids=["plain", "crc-prop"])
def test_inspect_reads_a_rocketmq_commitlog_folder(tmp_path: Path, crc_prop: bool) -> None:
    folder, placed, msgs = _rocket_dir(tmp_path, crc_prop=crc_prop)
    assert len(list(folder.iterdir())) > 2  # blank end-of-file records were written
    done = _inspect("--commitlog", str(folder))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["offset"], r["size"]) for r in lines] == [(p.offset, p.size) for p in placed]
    assert [r["magic"] for r in lines[:3]] == ["0xDAA320A7", "0xDAA320AB", "0xDAA320A7"]
    assert [r["topic"] for r in lines] == [m.topic for m in msgs]
    assert lines[2]["born_host"] == "[2001:db8::1]:7" and lines[2]["store_host"] == "[::1]:10911"
    assert lines[3]["body_sha256"] == hashlib.sha256(b"plain " * 100).hexdigest()
    assert lines[3]["sysflag"] == "normal+compressed"
    assert lines[0]["body_sha256"] == hashlib.sha256(b"v1 body").hexdigest()
    assert all(r["crc_tail"] is crc_prop for r in lines)
    assert "__CRC32#" not in lines[0]["properties"]
    verified = _inspect("--commitlog", str(folder), "--verify")
    assert verified.returncode == 0 and f"ok: {len(placed)} records" in verified.stderr


def test_inspect_verify_names_a_corrupt_record_and_an_unreadable_flag(tmp_path: Path) -> None:
    folder, placed, _ = _rocket_dir(tmp_path, crc_prop=True)
    victim = placed[5]
    segment = folder / f"{victim.offset // 8192 * 8192:020d}"
    data = bytearray(segment.read_bytes())
    data[victim.offset % 8192 + 30] ^= 0x40  # the physical offset: only __CRC32# covers it
    segment.write_bytes(bytes(data))
    done = _inspect("--commitlog", str(folder), "--verify")
    assert done.returncode == 1
    assert f"offset {victim.offset}" in done.stderr and "record CRC mismatch" in done.stderr

    other = tmp_path / "other"
    log = rmq.RocketLog(other, 4096)
    log.put(rmq.Message("Ok", b"fine"))
    bad = log.put(rmq.Message("Odd", b"zz", sysflag=0x1 | 0x600))
    log.write()
    done = _inspect("--commitlog", str(other), "--verify")
    assert done.returncode == 1
    assert f"offset {bad.offset}" in done.stderr and "0x601" in done.stderr
    assert "compression type 6" in done.stderr
