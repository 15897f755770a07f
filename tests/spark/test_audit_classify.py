"""Each category seeded on purpose; the audit finds exactly those tx_ids (SQLite source)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from audit_seed import ago, broker_seed, sqlite_engine, status_row, utcnow, write_status

from broker_lite.storage.properties import TRANSACTION_CHECK_TIMES as CHECK_TIMES
from outbox.cli import main as rocketbox_main
from spark.audit_job import main as audit_main

pytestmark = pytest.mark.spark

RULES = ["--grace", "30", "--slo", "5", "--stuck-after", "60"]


@dataclass
class Seeded:
    expected: dict[str, set[str]]
    db_url: str
    commitlog: Path
    as_of: datetime
    out: Path
    summary: dict[str, Any]
    code: int


def _seed(root: Path) -> tuple[dict[str, set[str]], str, Path, datetime]:
    expected: dict[str, set[str]] = {c: set() for c in (
        "ok", "lost", "phantom", "duplicate", "stuck_half", "discarded", "payload_mismatch",
        "late", "pending")}
    rows: list[dict[str, Any]] = []
    start = utcnow()
    as_of = start + timedelta(seconds=120)

    def row(tx: str, state: str, body: bytes = b"{}", created: datetime | None = None) -> None:
        rows.append(status_row(tx, "Orders", body, state, created or ago(0.001), len(rows) + 1))

    with broker_seed(root / "broker", segment_size=8192) as seed:
        for i in range(40):  # ok: committed on both sides
            tx = f"OK{i:04d}"
            row(tx, "COMMIT", f'{{"i":{i}}}'.encode())
            seed.half(tx, "Orders", f'{{"i":{i}}}'.encode())
            seed.commit(tx)
            expected["ok"].add(tx)
            seed.normal("Other", b"x" * 50)
        row("OKRB1", "ROLLBACK")  # rolled back on both sides
        seed.half("OKRB1", "Orders", b"{}")
        seed.rollback("OKRB1")
        row("OKRB2", "ROLLBACK")  # rolled back before any half
        expected["ok"] |= {"OKRB1", "OKRB2"}

        row("LOST1", "COMMIT")  # no half at all
        row("LOST2", "COMMIT")  # half rolled back although the DB committed
        seed.half("LOST2", "Orders", b"{}")
        seed.rollback("LOST2")
        expected["lost"] |= {"LOST1", "LOST2"}

        row("PHAN1", "ROLLBACK")
        seed.half("PHAN1", "Orders", b"{}")
        seed.commit("PHAN1")
        seed.half("PHAN2", "Orders", b"{}")  # no DB row at all
        seed.commit("PHAN2")
        expected["phantom"] |= {"PHAN1", "PHAN2"}

        row("DUP1", "COMMIT")
        seed.half("DUP1", "Orders", b"{}")
        seed.commit("DUP1")
        seed.commit("DUP1", op=False)
        expected["duplicate"].add("DUP1")

        row("STUCK1", "UNKNOWN")
        seed.half("STUCK1", "Orders", b"{}")
        seed.op("STUCK1", "CHECK", **{CHECK_TIMES: "1"})
        seed.half("STUCK2", "Orders", b"{}")  # half first, DB row never written
        expected["stuck_half"] |= {"STUCK1", "STUCK2"}

        row("DISC1", "UNKNOWN")
        seed.half("DISC1", "Orders", b"{}")
        seed.discard("DISC1")
        expected["discarded"].add("DISC1")

        row("BODY1", "COMMIT", b'{"amount":100}')
        seed.half("BODY1", "Payments", b'{"amount":999}')
        seed.commit("BODY1")
        expected["payload_mismatch"].add("BODY1")

        row("LATE1", "COMMIT", created=start - timedelta(seconds=30))
        seed.half("LATE1", "Orders", b"{}")
        seed.commit("LATE1")
        expected["late"].add("LATE1")

        row("PEND1", "COMMIT", created=as_of - timedelta(seconds=5))  # committed just now
        expected["pending"].add("PEND1")
    engine = sqlite_engine(root / "status.sqlite")
    write_status(engine, rows)
    engine.dispose()
    return expected, f"jdbc:sqlite:{root / 'status.sqlite'}", root / "broker", as_of


@pytest.fixture(scope="module")
def seeded(spark_session: object, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    root = tmp_path_factory.mktemp("classify")
    expected, url, commitlog, as_of = _seed(root)
    out = root / "divergent"
    code = audit_main(["--jdbc-url", url, "--commitlog", str(commitlog), *RULES,
                       "--as-of", as_of.isoformat(), "--out", str(out),
                       "--json", str(root / "summary.json"), "--html", str(root / "r.html"),
                       "--quiet"])
    summary = json.loads((root / "summary.json").read_text())
    return Seeded(expected, url, commitlog, as_of, out, summary, code)


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
def test_audit_exit_code_and_counts(seeded: Seeded) -> None:
    assert seeded.code == 1
    assert seeded.summary["counts"] == {k: len(v) for k, v in seeded.expected.items()}
    assert seeded.summary["corrupt"] == []
    assert seeded.summary["segments"] > 2  # 8 KiB segments rolled over


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
@pytest.mark.parametrize("category", ["lost", "phantom", "duplicate", "stuck_half",
                                      "discarded", "payload_mismatch", "late"])
def test_audit_finds_exactly_the_seeded(seeded: Seeded, spark_session: Any,
                                        category: str) -> None:
    rows = spark_session.read.parquet(str(seeded.out)).collect()
    found = {r["tx_id"] for r in rows if r["reason"] == category}
    assert found == seeded.expected[category]
    for r in rows:
        assert r["detail"], r  # every divergent row explains itself


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
def test_audit_evidence_columns(seeded: Seeded, spark_session: Any) -> None:
    rows = {r["tx_id"]: r for r in spark_session.read.parquet(str(seeded.out)).collect()}
    assert rows["DUP1"]["n_commits"] == 2 and len(rows["DUP1"]["commit_offsets"]) == 2
    assert rows["PHAN2"]["db_state"] is None and rows["PHAN1"]["db_state"] == "ROLLBACK"
    assert rows["BODY1"]["db_body_sha256"] != rows["BODY1"]["broker_body_sha256"]
    assert rows["LATE1"]["latency_ms"] >= 30_000
    assert rows["DISC1"]["discard_offset"] is not None and rows["DISC1"]["checks"] == 2
    assert rows["LOST2"]["rolled_back"] is True and rows["LOST1"]["half_offset"] is None


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
def test_audit_html_is_offline_with_charts(seeded: Seeded) -> None:
    page = (seeded.out.parent / "r.html").read_text()
    assert page.count("<svg") == 3
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "<script" not in page
    charts = re.findall(r"<svg.*?</svg>", page, re.S)
    for chart in charts:  # well-formed SVG, with one bar or slice per drawn value
        assert ElementTree.fromstring(chart).tag.endswith("svg")
    assert charts[0].count("<rect") > 9  # stacked time buckets plus the legend


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
def test_audit_window_bounds_the_rows(seeded: Seeded, tmp_path: Path) -> None:
    until = (seeded.as_of - timedelta(hours=2)).isoformat()
    code = audit_main(["--jdbc-url", seeded.db_url, "--commitlog", str(seeded.commitlog),
                       *RULES, "--as-of", seeded.as_of.isoformat(), "--until", until,
                       "--json", str(tmp_path / "s.json"), "--quiet"])
    assert code == 0
    assert set(json.loads((tmp_path / "s.json").read_text())["counts"].values()) == {0}


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
def test_rocketbox_audit_subcommand(seeded: Seeded, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``rocketbox audit`` runs the same job; a generous grace makes in-flight rows pending."""
    code = rocketbox_main(["audit", "--jdbc-url", seeded.db_url, "--commitlog",
                           str(seeded.commitlog), "--grace", "100000", "--slo", "5",
                           "--stuck-after", "100000", "--as-of", seeded.as_of.isoformat(),
                           "--json", str(tmp_path / "s.json")])
    counts = json.loads((tmp_path / "s.json").read_text())["counts"]
    assert code == 1  # phantom, duplicate, mismatch, late stay divergent
    assert counts["lost"] == 0 and counts["stuck_half"] == 0
    assert counts["phantom"] == 1  # PHAN1; PHAN2's row may still be on its way
    assert counts["pending"] == 1 + 2 + 2 + 1  # PEND1, LOST1/2, STUCK1/2, PHAN2
    assert "rocketbox audit" in capsys.readouterr().out
