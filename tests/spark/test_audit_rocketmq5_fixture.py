"""The audit on a real Apache RocketMQ 5.3 store and the outbox table that fed it.

The store (``../shared/fixtures/rocketmq5-store/`` beside the clone; its README
says how it was made) was written through RocketMQ's proxy: one proxy
transaction id per half, the row's key in ``ROCKETBOX_TX_ID``, two rows with
three halves each (a foreign producer's stray halves, never ended), op records
batching hundreds of half-queue offsets in one body, and RocketMQ's own
``rmq_sys_REVIVE_LOG_*`` and ``rmq_sys_wheel_timer`` records. The relay ran
after the 450 units of work were published, so its commits were visible about
7 s after their DB commit: ``--slo 30`` keeps them ``ok``, not ``late``.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from spark.audit_job import main as audit_main

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
#: CI puts ``shared/`` beside the clone
FIXTURE = REPO.parent / "shared" / "fixtures" / "rocketmq5-store"


def _fixture() -> Path:
    if not (FIXTURE / "outbox.sqlite").is_file():
        message = f"the shared RocketMQ 5 fixture is not at {FIXTURE}"
        if os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}:
            pytest.fail(f"{message} (CI=true)", pytrace=False)
        pytest.skip(message)
    return FIXTURE


def _audit(db: Path, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    summary = tmp_path / "summary.json"
    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{db}",
                       "--commitlog", str(_fixture() / "store"),
                       "--grace", "0", "--slo", "30", "--json", str(summary), "--quiet"])
    return code, json.loads(summary.read_text())


def _copy(tmp_path: Path) -> Path:
    db = tmp_path / "outbox.sqlite"
    shutil.copyfile(_fixture() / "outbox.sqlite", db)  # the fixture folder is read-only
    db.chmod(0o644)
    return db


@pytest.mark.timeout(300)
def test_audit_of_a_real_rocketmq5_store_is_clean(spark_session: Any, tmp_path: Path) -> None:
    code, summary = _audit(_copy(tmp_path), tmp_path)
    counts = summary["counts"]
    assert counts["ok"] == 360
    assert summary["invariant_violations"] == 0 and summary["divergent"] == 0
    assert summary["corrupt"] == [] and code == 0
    assert {k: v for k, v in counts.items() if v} == {"ok": 360}


@pytest.mark.timeout(300)
def test_audit_of_a_tampered_rocketmq5_outbox(spark_session: Any, tmp_path: Path) -> None:
    db = _copy(tmp_path)
    with sqlite3.connect(db) as conn:
        ids = [r[0] for r in conn.execute(
            "SELECT tx_id FROM rocketbox_transaction WHERE relayed_at IS NOT NULL "
            "ORDER BY seq LIMIT 3")]
        deleted, changed, model = ids
        conn.execute("DELETE FROM rocketbox_transaction WHERE tx_id = ?", (deleted,))
        conn.execute("UPDATE rocketbox_transaction SET body = X'7B7D' WHERE tx_id = ?",
                     (changed,))
        columns = [r[1] for r in conn.execute("PRAGMA table_info(rocketbox_transaction)")]
        picked = ", ".join("?" if c in ("tx_id", "seq") else c for c in columns)
        conn.execute(  # a relayed row the broker never saw: same columns, a new key
            f"INSERT INTO rocketbox_transaction ({', '.join(columns)}) SELECT {picked} "
            "FROM rocketbox_transaction WHERE tx_id = ?",
            [("NEVER-SEEN-BY-THE-BROKER" if c == "tx_id" else 10_000_000)
             for c in columns if c in ("tx_id", "seq")] + [model])
    code, summary = _audit(db, tmp_path)
    counts = summary["counts"]
    assert {k: v for k, v in counts.items() if v and k != "ok"} == {
        "phantom": 1, "payload_mismatch": 1, "lost": 1}
    assert counts["ok"] == 360 - 2 and code == 1
    assert summary["invariant_violations"] == 3
    by_id = {d["tx_id"]: d["category"] for d in summary["divergent_ids"]}
    assert by_id == {deleted: "phantom", changed: "payload_mismatch",
                     "NEVER-SEEN-BY-THE-BROKER": "lost"}


@pytest.mark.timeout(300)
def test_quiet_prints_no_java_or_spark_warning(tmp_path: Path) -> None:
    """``--quiet`` in its own process (its own JVM): nothing on stdout, no WARN on stderr."""
    db = _copy(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "spark.audit_job", "--jdbc-url", f"jdbc:sqlite:{db}",
         "--commitlog", str(_fixture() / "store"), "--grace", "0", "--slo", "30",
         "--json", str(tmp_path / "s.json"), "--quiet"],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert [line for line in done.stderr.splitlines() if "WARN" in line] == []
    assert json.loads((tmp_path / "s.json").read_text())["counts"]["ok"] == 360
