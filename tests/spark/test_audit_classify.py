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
from bs4 import BeautifulSoup

from broker_lite.storage.properties import TRANSACTION_CHECK_TIMES as CHECK_TIMES
from outbox.cli import main as rocketbox_main
from spark.audit_job import main as audit_main
from tests.spark.audit_seed import (
    ago,
    broker_seed,
    relayed_row,
    sqlite_engine,
    status_row,
    utcnow,
    write_status,
)

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
        "late", "pending", "parked", "undelivered")}
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

        # the relay recorded these as relayed (a row it still owes is parked or undelivered)
        rows.append(relayed_row("LOST1", "Orders", b"{}", ago(0.001), len(rows) + 1))  # no half
        # half rolled back although the DB committed
        rows.append(relayed_row("LOST2", "Orders", b"{}", ago(0.001), len(rows) + 1))
        seed.half("LOST2", "Orders", b"{}")
        seed.rollback("LOST2")
        expected["lost"] |= {"LOST1", "LOST2"}

        # parked by the relay: reported as such at any age (it will never be retried alone)
        rows.append(status_row("PARK1", "Oders", b"{}", "COMMIT", ago(0.001), len(rows) + 1,
                               attempts=10, parked=True,
                               last_error="no PUB permission on topic 'Oders'"))
        rows.append(status_row("PARK2", "Orders", b"x" * 300, "COMMIT",
                               as_of - timedelta(seconds=5), len(rows) + 1, attempts=1,
                               parked=True, last_error="body too large"))
        expected["parked"] |= {"PARK1", "PARK2"}

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
                                      "discarded", "payload_mismatch", "late", "parked"])
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


@pytest.mark.timeout(240)  # the first test also starts Spark and seeds
def test_audit_html_has_axes_units_rules_and_the_divergent_ids(seeded: Seeded) -> None:
    """The report says what its charts measure, the rules it used and which tx_ids diverged."""
    page = BeautifulSoup((seeded.out.parent / "r.html").read_text(), "html.parser")
    labels = [t.get_text() for t in page.select("svg .axis-label")]
    assert "transactions per bucket" in labels
    assert any(label.startswith("commit-to-visible latency (log scale") for label in labels)
    assert any(label.startswith("tx_ids per ") for label in labels)
    assert "divergent tx_ids per topic" in labels
    latency = page.find("svg", attrs={"aria-label": "commit-to-visible latency histogram"})
    ticks = [t.get_text() for t in latency.select(".tick")]
    assert {"1 ms", "10 ms", "100 ms", "1 s", "10 s"} <= set(ticks)  # units on the x axis
    buckets = [t.get_text() for t in latency.select("rect.bucket title")]
    # every bucket from the fastest commit to the slowest (LATE1, 30 s), empty ones too
    counts = [int(n) for b in buckets for n in re.findall(r": (\d+) transaction", b)]
    assert len(counts) == len(buckets)
    assert sum(counts) == 40 + 4  # the OK commits, BODY1, LATE1, DUP1, PHAN1
    assert 0 in counts and buckets[-1].startswith("25 s to 40 s")
    assert "SLO 5 s" in latency.get_text()
    rules = {r.find_all("td")[0].get_text(): r.find_all("td")[1].get_text()
             for r in page.select("#rules tr")}
    assert rules["grace (--grace)"] == "30 s" and rules["SLO (--slo)"] == "5 s"
    assert rules["stuck after (--stuck-after)"] == "60 s"
    listed = {r.find_all("td")[0].get_text(): r.find_all("td")[1].get_text()
              for r in page.select("#divergent-ids tr") if r.find("td")}
    divergent = {tx: c for c, ids in seeded.expected.items() for tx in ids
                 if c not in ("ok", "pending")}
    assert listed == divergent  # fewer than 50: all of them, with their category
    assert page.select_one("a#parquet")["href"] == "divergent"  # relative to the report
