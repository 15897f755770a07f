"""The audit over a broker export (``--broker-export``) finds what it finds on a commit log.

Real rows go through the real relay to a real broker_lite. The export is what
that broker committed, made from its commit log with the audit's own decoder
(:func:`spark.segments.decode_segment`: each commit record is one exported
message, its offset the position) and written with
:func:`outbox.broker_export.write_export`, as a NATS or RabbitMQ exporter
writes one. A clean export audits clean; an export tampered with line by line
is reported for exactly the tx_ids hit: a dropped line is ``lost``, a line for a
rolled-back transaction ``phantom``, a line twice ``duplicate``, a changed hash
``payload_mismatch``, a store time past the SLO ``late``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from outbox import Outbox, RelaySettings, publish
from outbox.broker_export import ExportedMessage, read_export, write_export
from spark.audit_job import main as audit_main
from spark.segments import KIND_COMMIT, RECORD_FIELDS, SEGMENT_NAME, decode_segment
from spark.session import default_jars
from tests.support import BrokerLiteServer
from tests.support.publishers import drain
from tests.support.sqlite import sqlite_outbox_engine

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

N = 60
# every row is older than --grace at the audit's "now"; a message 10 min late is late
RULES = ["--grace", "0", "--slo", "60", "--stuck-after", "600"]


@dataclass
class Run:
    db: Path
    engine: Engine
    data_dir: Path
    published: list[str]
    rolled_back: str


@contextmanager
def _pipeline(tmp_path: Path, broker: BrokerLiteServer) -> Iterator[Run]:
    """Publish ``N`` rows (and one rolled back), relay them all to broker_lite."""
    db = tmp_path / "outbox.sqlite"
    engine = sqlite_outbox_engine(db)
    outbox = Outbox(engine=engine, broker=broker.native,
                    relay=RelaySettings(batch_size=100, broker_timeout=30.0))
    with Session(engine) as session, session.begin():
        published = [publish(session, f"Export{i % 3}", {"i": i}, outbox=outbox, tag="t")
                     for i in range(N)]
    with Session(engine) as session, session.begin() as tx:  # rolled back: never sent
        rolled_back = publish(session, "Export0", {"i": -1}, outbox=outbox)
        tx.rollback()
    report = drain(outbox)
    assert (report.relayed, report.failed) == (N, 0), report.errors[:5]
    try:
        yield Run(db, engine, broker.data_dir, published, rolled_back)
    finally:
        engine.dispose()


def committed(data_dir: Path) -> list[ExportedMessage]:
    """What broker_lite committed, as exported messages (its commit-log offset as position)."""
    found: list[ExportedMessage] = []
    segments = sorted(p for p in (data_dir / "commitlog").iterdir()
                      if SEGMENT_NAME.match(p.name))
    for segment in segments:
        for row in decode_segment(segment.name, segment.read_bytes()):
            record = dict(zip(RECORD_FIELDS, row, strict=True))
            if record["kind"] == KIND_COMMIT:
                found.append(ExportedMessage(
                    tx_id=str(record["tx_id"]), position=str(record["offset"]),
                    time_ms=int(record["store_ts"]), body_sha256=str(record["body_sha256"]),
                    destination=str(record["topic"])))
    return found


def _audit(spark_session: Any, tmp_path: Path, run: Run, export: Path,
           ) -> tuple[int, dict[str, Any], dict[str, str]]:
    out, summary = tmp_path / "divergent", tmp_path / "summary.json"
    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{run.db}", "--broker-export", str(export),
                       *RULES, "--out", str(out), "--json", str(summary),
                       "--html", str(tmp_path / "report.html"), "--quiet"])
    document: dict[str, Any] = json.loads(summary.read_text())
    divergent = {r["tx_id"]: r["reason"] for r in
                 spark_session.read.parquet(str(out)).select("tx_id", "reason").collect()}
    return code, document, divergent


def _only(counts: dict[str, int], **expected: int) -> dict[str, int]:
    return {**dict.fromkeys(counts, 0), **expected}


@pytest.mark.timeout(300)
def test_a_clean_export_in_a_directory_audits_clean(spark_session: Any, tmp_path: Path,
                                                    broker_lite_server: BrokerLiteServer
                                                    ) -> None:
    with _pipeline(tmp_path, broker_lite_server) as run:
        messages = committed(run.data_dir)
        assert sorted(m.tx_id for m in messages) == sorted(run.published)
        export = tmp_path / "export"
        export.mkdir()
        half = len(messages) // 2  # two files: read by two tasks
        assert write_export(messages[:half], export / "part-0.jsonl") == half
        assert write_export(messages[half:], export / "part-1.jsonl") == len(messages) - half
        (export / "README.txt").write_text("not an export file: left alone")
        code, document, divergent = _audit(spark_session, tmp_path, run, export)
    assert document["counts"] == _only(document["counts"], ok=N)
    assert document["divergent"] == 0
    assert document["broker_export"] == {"files": 2, "messages": N}
    assert divergent == {}
    assert code == 0
    html = (tmp_path / "report.html").read_text()
    assert f"broker export read: 2 file(s), {N} message(s)." in html


@pytest.mark.timeout(300)
def test_a_tampered_export_is_reported_for_exactly_the_lines_hit(
        spark_session: Any, tmp_path: Path, broker_lite_server: BrokerLiteServer) -> None:
    with _pipeline(tmp_path, broker_lite_server) as run:
        messages = committed(run.data_dir)
        by_id = {m.tx_id: m for m in messages}
        dropped, doubled, changed, slow = (run.published[i] for i in (5, 17, 33, 48))
        tampered = [m for m in messages if m.tx_id != dropped]
        tampered.append(dataclasses.replace(by_id[doubled], position="9999999"))
        tampered.append(dataclasses.replace(by_id[run.published[0]], tx_id=run.rolled_back))
        tampered = [dataclasses.replace(m, body_sha256="0" * 64) if m.tx_id == changed
                    else dataclasses.replace(m, time_ms=m.time_ms + 600_000)
                    if m.tx_id == slow else m for m in tampered]
        export = tmp_path / "tampered.jsonl"
        write_export(tampered, export)
        assert len(list(read_export(export))) == N + 1
        code, document, divergent = _audit(spark_session, tmp_path, run, export)
    assert divergent == {dropped: "lost", run.rolled_back: "phantom", doubled: "duplicate",
                         changed: "payload_mismatch", slow: "late"}
    assert document["counts"] == _only(document["counts"], ok=N - 4, lost=1, phantom=1,
                                       duplicate=1, payload_mismatch=1, late=1)
    details = {d["tx_id"]: d["detail"] for d in document["divergent_ids"]}
    assert details[doubled] == f"messages at positions {by_id[doubled].position},9999999"
    assert details[run.rolled_back] == (f"message at position {by_id[run.published[0]].position}"
                                        " but DB row missing")
    assert details[dropped].endswith(", not in the broker export")
    assert code == 1


@pytest.mark.timeout(300)
def test_spark_submit_runs_the_job_over_an_export(tmp_path: Path,
                                                  broker_lite_server: BrokerLiteServer) -> None:
    """``spark-submit spark/audit_job.py --broker-export``: the executors import the export's
    reader from the checkout (PYTHONPATH), as with the commit log's decoder."""
    submit = Path(sys.executable).with_name("spark-submit")
    if not submit.exists():
        pytest.skip(f"no spark-submit beside {sys.executable}")
    with _pipeline(tmp_path, broker_lite_server) as run:
        messages = committed(run.data_dir)
        dropped = run.published[9]
        write_export([m for m in messages if m.tx_id != dropped], tmp_path / "broker.jsonl")
        summary = tmp_path / "summary.json"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(
            [str(submit), "--master", "local[1]", "--jars", ",".join(default_jars()),
             "--driver-java-options", f"-Dlog4j2.configurationFile={ROOT}/spark/"
             "log4j2-quiet.properties", str(ROOT / "spark" / "audit_job.py"),
             "--jdbc-url", f"jdbc:sqlite:{run.db}", "--broker-export",
             str(tmp_path / "broker.jsonl"), *RULES, "--json", str(summary), "--quiet"],
            env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
            check=False, cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    document = json.loads(summary.read_text())
    assert document["counts"] == _only(document["counts"], ok=N - 1, lost=1)
    assert [d["tx_id"] for d in document["divergent_ids"]] == [dropped]
