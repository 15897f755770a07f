"""The audit on an Apache RocketMQ 5 commit log, built record by record from the Java rules.

Halves on RMQ_SYS_TRANS_HALF_TOPIC with the transaction bits cleared, renewed
copies on each check, op records naming half-queue offsets (batched, no
transaction id), commits naming a half copy's offset, discards on
TRANS_CHECK_MAX_TIME_TOPIC. Segments are read in byte-range splits far
smaller than a record run, so records straddle every split boundary.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spark.audit_job import main as audit_main
from spark.commitlog_source import SPLIT_CONF
from tests.spark.audit_seed import sqlite_engine, status_row, utcnow, write_status
from tests.support import rocketmq_log as rmq

pytestmark = pytest.mark.spark

GROUP = "audit-pg"


class RocketBroker:
    """What RocketMQ's broker appends for transactions (TransactionalMessageBridge et al.)."""

    def __init__(self, log: rmq.RocketLog, base_ms: int) -> None:
        self.log = log
        self.base_ms = base_ms
        self.copies: dict[str, list[rmq.Placed]] = {}
        self.messages: dict[str, rmq.Message] = {}

    def _at(self, seconds: float) -> int:
        return self.base_ms + int(seconds * 1000)

    def half(self, tx: str, body: bytes, at: float, row: str | None = None) -> rmq.Placed:
        """A half; ``row``: sent through a proxy, the row's key in ``ROCKETBOX_TX_ID``."""
        extra = {"ROCKETBOX_TX_ID": row} if row is not None else {}
        msg = rmq.Message(rmq.HALF_TOPIC, body, {
            "TAGS": "t", "UNIQ_KEY": tx, "__transactionId__": tx, "REAL_TOPIC": "Orders",
            "REAL_QID": "1", "PGROUP": GROUP, "TRAN_MSG": "true", **extra},
            born_ts=self._at(at), store_ts=self._at(at))
        self.messages[tx] = msg
        placed = self.log.put(msg)
        self.copies[tx] = [placed]
        return placed

    def renew(self, tx: str, times: int, at: float) -> rmq.Placed:
        """putBackHalfMsgQueue: the half again, TRANSACTION_CHECK_TIMES counted up."""
        first = self.messages[tx]
        msg = rmq.Message(rmq.HALF_TOPIC, first.body,
                          {**first.props, "TRANSACTION_CHECK_TIMES": str(times)},
                          born_ts=first.born_ts, store_ts=self._at(at))
        placed = self.log.put(msg)
        self.copies[tx].append(placed)
        return placed

    def commit(self, tx: str, at: float, copy: int = 0) -> rmq.Placed:
        """EndTransactionProcessor: the named copy on its real topic, sysflag COMMIT."""
        half = self.messages[tx]
        props = {k: v for k, v in half.props.items()
                 if k not in ("REAL_TOPIC", "REAL_QID", "TRAN_MSG")}
        return self.log.put(rmq.Message("Orders", half.body, props, queue_id=1,
                                        sysflag=rmq.COMMIT, born_ts=half.born_ts,
                                        store_ts=self._at(at),
                                        prepared_offset=self.copies[tx][copy].offset))

    def op(self, removed: list[tuple[str, int]], at: float) -> rmq.Placed:
        """One op record removing several half copies (``getOpMessage`` batches them)."""
        body = "".join(f"{self.copies[tx][copy].queue_offset}," for tx, copy in removed)
        return self.log.put(rmq.Message(rmq.OP_TOPIC, body.encode(),
                                        {"TAGS": "d", "UNIQ_KEY": f"op-{at}"},
                                        store_ts=self._at(at)))

    def discard(self, tx: str, times: int, at: float) -> rmq.Placed:
        half = self.messages[tx]
        return self.log.put(rmq.Message(rmq.MAX_TIME_TOPIC, half.body,
                                        {**half.props, "TRANSACTION_CHECK_TIMES": str(times)},
                                        born_ts=half.born_ts, store_ts=self._at(at)))


@pytest.mark.timeout(400)
def test_audit_classifies_a_rocketmq_log_read_in_splits(
        spark_session: Any, tmp_path: Path) -> None:
    as_of = utcnow()
    base = as_of - timedelta(seconds=3600)
    base_ms = int(base.timestamp() * 1000)
    log = rmq.RocketLog(tmp_path / "store" / "commitlog", 8 * 1024, crc_prop=True)
    broker = RocketBroker(log, base_ms)
    rows: list[dict[str, Any]] = []
    expected: dict[str, set[str]] = {}

    def row(tx: str, state: str, body: bytes, at: float) -> None:
        created = base + timedelta(seconds=at)
        # every COMMIT row here had its half sent: the relay recorded it as relayed, so a
        # commit the broker lacks is ``lost``, not ``undelivered``
        relay = {"relayed_at": created + timedelta(milliseconds=5)} if state == "COMMIT" else {}
        rows.append(status_row(tx, "Orders", body, state, created, len(rows) + 1, **relay))

    for i in range(30):  # ok: committed directly; ops batched three at a time
        tx = f"OK{i:03d}"
        row(tx, "COMMIT", b"ok %d" % i, i)
        broker.half(tx, b"ok %d" % i, i)
        broker.commit(tx, i + 0.5)
        if i % 3 == 2:
            broker.op([(f"OK{j:03d}", 0) for j in range(i - 2, i + 1)], i + 1)
    row("RENEW1", "COMMIT", b"renewed", 280.8)  # checked 3 times, committed from the last check
    broker.half("RENEW1", b"renewed", 100)
    for n in (1, 2, 3):
        broker.renew("RENEW1", n, 100 + 60 * n)
    broker.commit("RENEW1", 281, copy=3)
    broker.op([("RENEW1", 3)], 281)
    row("RB1", "ROLLBACK", b"rb", 300)  # rolled back: op record only
    broker.half("RB1", b"rb", 300)
    broker.op([("RB1", 0)], 301)
    row("LOST1", "COMMIT", b"lost", 400)  # the DB committed, the broker rolled back
    broker.half("LOST1", b"lost", 400)
    broker.renew("LOST1", 1, 460)
    broker.op([("LOST1", 1)], 461)
    expected["lost"] = {"LOST1"}
    row("PHAN1", "ROLLBACK", b"ph", 500)  # the DB rolled back, the broker committed
    broker.half("PHAN1", b"ph", 500)
    broker.commit("PHAN1", 501)
    broker.op([("PHAN1", 0)], 501)
    expected["phantom"] = {"PHAN1"}
    row("DUP1", "COMMIT", b"dup", 600)  # committed twice: the first half and a renewed copy
    broker.half("DUP1", b"dup", 600)
    broker.commit("DUP1", 601)
    broker.renew("DUP1", 1, 660)
    broker.commit("DUP1", 661, copy=1)
    broker.op([("DUP1", 0), ("DUP1", 1)], 662)
    expected["duplicate"] = {"DUP1"}
    row("STUCK1", "UNKNOWN", b"st", 700)  # checked and renewed, never resolved
    broker.half("STUCK1", b"st", 700)
    for n in (1, 2, 3, 4):
        broker.renew("STUCK1", n, 700 + 60 * n)
    expected["stuck_half"] = {"STUCK1"}
    row("DISC1", "UNKNOWN", b"dc", 1000)  # checked up to the max, then discarded
    broker.half("DISC1", b"dc", 1000)
    for n in (1, 2, 3):
        broker.renew("DISC1", n, 1000 + 60 * n)
    broker.discard("DISC1", 3, 1200)
    expected["discarded"] = {"DISC1"}
    segments = log.write()
    assert len(segments) > 2
    engine = sqlite_engine(tmp_path / "status.sqlite")
    write_status(engine, rows)
    engine.dispose()

    spark_session.conf.set(SPLIT_CONF, "1500")  # records straddle split boundaries
    try:
        code = audit_main([
            "--jdbc-url", f"jdbc:sqlite:{tmp_path / 'status.sqlite'}",
            "--commitlog", str(tmp_path / "store"), "--grace", "30", "--slo", "5",
            "--stuck-after", "600", "--as-of", as_of.isoformat(),
            "--out", str(tmp_path / "out"), "--json", str(tmp_path / "s.json"), "--quiet"])
    finally:
        spark_session.conf.unset(SPLIT_CONF)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert code == 1 and summary["corrupt"] == []
    found: dict[str, set[str]] = {}
    for r in spark_session.read.parquet(str(tmp_path / "out")).collect():
        found.setdefault(r["reason"], set()).add(r["tx_id"])
    assert found == expected
    evidence = {r["tx_id"]: r for r in spark_session.read.parquet(str(tmp_path / "out"))
                .collect()}
    assert evidence["DISC1"]["checks"] == 3 and evidence["LOST1"]["rolled_back"] is True
    assert evidence["STUCK1"]["half_offset"] == broker.copies["STUCK1"][0].offset
    assert summary["counts"]["ok"] == 30 + 2  # OK*, RENEW1 and RB1


@pytest.mark.timeout(400)
def test_audit_keys_a_proxy_log_by_the_row_and_passes_over_system_topics(
        spark_session: Any, tmp_path: Path) -> None:
    """Through a RocketMQ 5 proxy: one proxy transaction id per half, the row in
    ``ROCKETBOX_TX_ID``; several halves per row; RocketMQ's own system topics."""
    as_of = utcnow()
    base = as_of - timedelta(seconds=3600)
    base_ms = int(base.timestamp() * 1000)
    log = rmq.RocketLog(tmp_path / "store" / "commitlog", 64 * 1024, crc_prop=True)
    broker = RocketBroker(log, base_ms)
    rows: list[dict[str, Any]] = []

    def row(tx: str, body: bytes, at: float) -> None:
        created = base + timedelta(seconds=at)
        rows.append(status_row(tx, "Orders", body, "COMMIT", created, len(rows) + 1,
                               relayed_at=created + timedelta(milliseconds=5)))

    row("RESENT", b"r", 10)  # a relay killed after the half; the next one sends it again
    broker.half("p1", b"r", 10, row="RESENT")
    broker.half("p2", b"r", 12, row="RESENT")
    broker.commit("p2", 12.5)
    broker.renew("p1", 1, 70)  # the first half checked, then rolled back by the checker
    row("STRAY", b"s", 20)  # a foreign producer's second half, renewed, never ended
    broker.half("p3", b"s", 20, row="STRAY")
    broker.commit("p3", 20.5)
    broker.half("p4", b"s", 21, row="STRAY")
    broker.renew("p4", 1, 81)
    broker.renew("p4", 2, 141)
    row("TWICE", b"t", 30)  # a stray half committed by a check: a second commit
    broker.half("p5", b"t", 30, row="TWICE")
    broker.commit("p5", 30.5)
    broker.half("p6", b"t", 31, row="TWICE")
    broker.commit("p6", 91)
    row("GONE", b"g", 40)  # relayed, rolled back by the broker: no commit
    broker.half("p7", b"g", 40, row="GONE")
    broker.op([("p2", 0), ("p3", 0), ("p5", 0), ("p7", 0), ("p1", 1), ("p6", 0)], 100)
    for n in range(5):  # RocketMQ's bookkeeping: revive log and timer wheel records, one
        for topic in ("rmq_sys_REVIVE_LOG_DefaultCluster", "rmq_sys_wheel_timer"):
            log.put(rmq.Message(topic, b"%d" % n, {  # carrying a row key and a commit flag
                "ROCKETBOX_TX_ID": "RESENT", "UNIQ_KEY": f"{topic}-{n}"},
                sysflag=rmq.COMMIT if n == 0 else 0, store_ts=broker._at(200 + n)))
    log.write()
    engine = sqlite_engine(tmp_path / "status.sqlite")
    write_status(engine, rows)
    engine.dispose()

    code = audit_main([
        "--jdbc-url", f"jdbc:sqlite:{tmp_path / 'status.sqlite'}",
        "--commitlog", str(tmp_path / "store"), "--grace", "0", "--slo", "120",
        "--stuck-after", "600", "--as-of", as_of.isoformat(),
        "--json", str(tmp_path / "s.json"), "--quiet"])
    summary = json.loads((tmp_path / "s.json").read_text())
    found = {d["tx_id"]: d["category"] for d in summary["divergent_ids"]}
    assert found == {"TWICE": "duplicate", "GONE": "lost"}, summary
    assert summary["counts"]["ok"] == 2 and code == 1  # RESENT and STRAY
    assert summary["invariant_violations"] == 2
