"""Format-1 data directories: refused with a pointer to migrate-store, which rewrites them."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from broker_lite.errors import StorageError
from broker_lite.storage import MessageStore, StoreConfig
from tests.support import rocketmq_log as rmq

pytestmark = pytest.mark.timeout(60)
SEGMENT = 4096
HALF, OP, MAX = rmq.HALF_TOPIC, rmq.OP_TOPIC, rmq.MAX_TIME_TOPIC


class LegacyLog:
    """Records as broker_lite wrote them before format 2 (V2 magic always, hex CRC tail)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = bytearray()
        self.queues: dict[tuple[str, int], int] = {}

    def put(self, topic: str, body: bytes, props: dict[str, str], *, sysflag: int = 0,
            prepared: int = 0, store_ts: int = 1_700_000_000_000) -> tuple[int, int]:
        seg_pos = len(self.data) % SEGMENT
        p = rmq.props_string(props)
        size = 88 + len(body) + 2 + len(topic) + 2 + len(p) + 18
        if SEGMENT - seg_pos - 8 < size:
            self.data += struct.pack(">II", SEGMENT - seg_pos, 0xCBD43194)
            self.data += bytes(SEGMENT - seg_pos - 8)
        offset = len(self.data)
        key = (topic, 0)
        queue_offset = self.queues.get(key, 0) if sysflag & 0xC != 0xC else 0
        if sysflag & 0xC != 0xC:
            self.queues[key] = queue_offset + 1
        head = struct.pack(">IIIiiqqiq8sq8siqI", size, 0xDAA320AB, zlib.crc32(body), 0, 0,
                           queue_offset, offset, sysflag, store_ts, bytes(8), store_ts,
                           bytes(8), 0, prepared, len(body))
        tail = struct.pack(">H", len(topic)) + topic.encode() \
            + struct.pack(">H", len(p) + 18) + p + b"__CRC32#\x01"
        crc = zlib.crc32(tail, zlib.crc32(head))
        self.data += head + body + tail + b"%08X\x02" % crc
        return offset, queue_offset

    def write(self) -> None:
        log_dir = self.root / "commitlog"
        log_dir.mkdir(parents=True)
        for start in range(0, len(self.data), SEGMENT):
            chunk = bytes(self.data[start : start + SEGMENT])
            (log_dir / f"{start:020d}").write_bytes(chunk + bytes(SEGMENT - len(chunk)))
        (self.root / "meta.json").write_text(json.dumps({"format": 1, "segment_size": SEGMENT}))
        (self.root / "offsets.json").write_text('{"g": 1}')


def _legacy(root: Path) -> dict[str, int]:
    log = LegacyLog(root)
    for i in range(30):
        log.put("Orders", b"order %d" % i, {"UNIQ_KEY": f"m{i}", "TAGS": "t"})
    tx = {"__transactionId__": "tx-1", "UNIQ_KEY": "tx-1", "REAL_TOPIC": "Pay", "REAL_QID": "0",
          "PGROUP": "pg", "TRAN_MSG": "true"}
    half, half_q = log.put(HALF, b"pay", tx, sysflag=0x4, store_ts=1_700_000_001_000)
    open_tx = {**tx, "__transactionId__": "tx-2", "UNIQ_KEY": "tx-2"}
    _, open_q = log.put(HALF, b"open", open_tx, sysflag=0x4, store_ts=1_700_000_002_000)
    log.put(OP, str(open_q).encode(), {"TAGS": "c", "__transactionId__": "tx-2",
                                       "TX_STATE": "CHECK", "TRANSACTION_CHECK_TIMES": "1"})
    commit, _ = log.put("Pay", b"pay", {"__transactionId__": "tx-1", "UNIQ_KEY": "tx-1"},
                        sysflag=0x8, prepared=half, store_ts=1_700_000_003_000)
    log.put(OP, str(half_q).encode(), {"TAGS": "d", "__transactionId__": "tx-1",
                                       "TX_STATE": "COMMIT"})
    log.write()
    return {"half": half, "commit": commit}


def test_a_format_1_directory_is_refused_naming_migrate_store(tmp_path: Path) -> None:
    _legacy(tmp_path / "old")
    with pytest.raises(StorageError, match="broker-lite migrate-store --data-dir"):
        MessageStore(StoreConfig(data_dir=tmp_path / "old", segment_size=SEGMENT))
    assert json.loads((tmp_path / "old" / "meta.json").read_text())["format"] == 1


def test_migrate_store_rewrites_it_in_rocketmqs_model(tmp_path: Path) -> None:
    _legacy(tmp_path / "old")
    before = {p.name: p.read_bytes() for p in (tmp_path / "old" / "commitlog").iterdir()}
    done = subprocess.run([sys.executable, "-m", "broker_lite", "migrate-store", "--data-dir",
                           str(tmp_path / "old"), "--to", str(tmp_path / "new")],
                          capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["records"] == 35 and json.loads(done.stdout)["stopped_at"] == ""
    assert before == {p.name: p.read_bytes() for p in (tmp_path / "old" / "commitlog").iterdir()}
    assert (tmp_path / "new" / "offsets.json").read_text() == '{"g": 1}'
    log = rmq.decode_dir(tmp_path / "new" / "commitlog", need_crc_prop=True)
    orders = [r for r in log if r.topic == "Orders"]
    assert [(r.body, r.queue_offset) for r in orders] == [(b"order %d" % i, i) for i in range(30)]
    halves = [r for r in log if r.topic == HALF]
    assert [(h.body, h.sysflag & 0xC, h.props.get("TRANSACTION_CHECK_TIMES")) for h in halves] \
        == [(b"pay", 0, None), (b"open", 0, None), (b"open", 0, "1")]
    (commit,) = [r for r in log if r.sysflag & 0xC == 0x8]
    assert commit.prepared_offset == halves[0].offset and commit.store_ts == 1_700_000_003_000
    assert [r.body for r in log if r.topic == OP] == [b"0,"]
    with MessageStore(StoreConfig(data_dir=tmp_path / "new", segment_size=SEGMENT)) as store:
        assert store.queue_offsets("Orders", 0) == (0, 30)
    again = subprocess.run([sys.executable, "-m", "broker_lite", "migrate-store", "--data-dir",
                            str(tmp_path / "old"), "--to", str(tmp_path / "new")],
                           capture_output=True, text=True, timeout=50)
    assert again.returncode == 2 and "not empty" in again.stderr
