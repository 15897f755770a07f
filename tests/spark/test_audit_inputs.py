"""Inputs: PostgreSQL with partitioned reads, damaged segments, and bad input (exit 2)."""

from __future__ import annotations

import json
import os
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from broker_lite.storage.record import HEADER_SIZE
from spark.audit_job import main as audit_main
from spark.status_source import JdbcSource, read_status
from tests.spark.audit_seed import broker_seed, relayed_row, sqlite_engine, utcnow, write_status
from tests.support import PostgresServer

pytestmark = pytest.mark.spark

RULES = ["--grace", "30", "--slo", "60", "--stuck-after", "3600", "--quiet"]


def _seed_ok(root: Path, n: int, *, segment_size: int = 8192
             ) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``n`` clean transactions; returns the status rows and each tx's commit offset."""
    rows: list[dict[str, Any]] = []
    commits: dict[str, int] = {}
    with broker_seed(root / "broker", segment_size=segment_size) as seed:
        for i in range(n):
            tx = f"TX{i:05d}"
            body = f'{{"n":{i}}}'.encode()
            rows.append(relayed_row(tx, f"T{i % 3}", body, utcnow(), i + 1))
            seed.half(tx, f"T{i % 3}", body)
            commits[tx] = seed.commit(tx).physical_offset
    return rows, commits


def _segments(root: Path) -> list[Path]:
    return sorted((root / "broker" / "commitlog").iterdir())


def _run(url: str, commitlog: Path, tmp: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    as_of = (utcnow() + timedelta(seconds=120)).isoformat()  # everything is past its grace
    code = audit_main(["--jdbc-url", url, "--commitlog", str(commitlog), *RULES, "--as-of", as_of,
                       "--json", str(tmp / "s.json"), "--out", str(tmp / "out"), *extra])
    return code, json.loads((tmp / "s.json").read_text())


@pytest.mark.timeout(180)
def test_audit_damaged_segments_reported_rest_audited(spark_session: Any,
                                                      tmp_path: Path) -> None:
    rows, commits = _seed_ok(tmp_path, 150)
    engine = sqlite_engine(tmp_path / "s.sqlite")
    write_status(engine, rows)
    engine.dispose()
    segments = _segments(tmp_path)
    assert len(segments) >= 5
    start = {p: int(p.name) for p in segments}
    # flip a body byte of a commit record in the second segment
    flipped_tx, flipped = next((tx, off) for tx, off in commits.items()
                               if start[segments[1]] < off < start[segments[2]])
    with open(segments[1], "r+b") as f:
        f.seek(flipped - start[segments[1]] + HEADER_SIZE)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    # cut the fourth segment in the middle of a commit record
    cut_tx, cut = next((tx, off) for tx, off in commits.items()
                       if start[segments[3]] + 1000 < off < start[segments[4]])
    with open(segments[3], "r+b") as f:
        f.truncate(cut - start[segments[3]] + 20)
    gone = {tx for tx, off in commits.items() if cut <= off < start[segments[4]]}

    code, summary = _run(f"jdbc:sqlite:{tmp_path / 's.sqlite'}", tmp_path / "broker", tmp_path)
    assert code == 1
    assert [(c["segment"], c["offset"]) for c in summary["corrupt"]] == [
        (segments[1].name, flipped), (segments[3].name, cut)]
    assert summary["corrupt"][0]["reason"] == "body CRC mismatch"
    assert summary["corrupt"][1]["reason"].startswith("bad total size")
    lost = {r["tx_id"] for r in spark_session.read.parquet(str(tmp_path / "out")).collect()
            if r["reason"] == "lost"}
    assert lost == {flipped_tx} | gone and cut_tx in gone
    assert summary["counts"]["ok"] == len(commits) - len(lost)


@pytest.mark.timeout(180)
def test_audit_postgres_partitioned_read(spark_session: Any, postgres_server: PostgresServer,
                                         tmp_path: Path) -> None:
    rows, _commits = _seed_ok(tmp_path, 300, segment_size=64 * 1024)
    rows.append(relayed_row("LOSTPG", "T0", b"{}", utcnow(), 10_000))
    rows[7]["body"] = b'{"changed":1}'
    db = postgres_server.create_database(f"audit_{uuid.uuid4().hex[:10]}")
    engine = create_engine(db.url)
    write_status(engine, rows)
    engine.dispose()
    url = f"jdbc:postgresql://{db.host}:{db.port}/{db.dbname}"
    status = read_status(spark_session, JdbcSource(url=url, user=db.user, num_partitions=4))
    assert status.rdd.getNumPartitions() == 4
    assert status.count() == 301

    code, summary = _run(url, tmp_path / "broker", tmp_path, "--user", db.user)
    assert code == 1
    found = {(r["tx_id"], r["reason"])
             for r in spark_session.read.parquet(str(tmp_path / "out")).collect()}
    assert found == {("LOSTPG", "lost"), (rows[7]["tx_id"], "payload_mismatch")}
    assert summary["counts"]["ok"] == 299


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", ["unreachable", "scheme", "no_table", "no_commitlog",
                                  "bad_option"])
def test_audit_bad_input_exits_2(spark_session: Any, tmp_path: Path, case: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    empty = sqlite_engine(tmp_path / "empty.sqlite")
    with empty.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE other (x INTEGER)")
    empty.dispose()
    (tmp_path / "broker" / "commitlog").mkdir(parents=True)
    url = {"unreachable": "jdbc:postgresql://127.0.0.1:1/nope",
           "scheme": "mysql://localhost/db"}.get(case, f"jdbc:sqlite:{tmp_path / 'empty.sqlite'}")
    commitlog = tmp_path / ("missing" if case == "no_commitlog" else "broker")
    args = ["--jdbc-url", url, "--commitlog", str(commitlog), "--quiet"]
    if case == "bad_option":
        args.append("--grace=soon")
    if case == "no_commitlog":  # a status table that exists, so the directory is the problem
        write_status(sqlite_engine(tmp_path / "empty.sqlite"), [])
    assert audit_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    mine = [line for line in err if line.startswith("rocketbox audit:")]
    assert len(mine) == 1, err
    assert "Traceback" not in "\n".join(err)
    expected = {"unreachable": "Connection", "scheme": "neither", "no_table":
                "rocketbox_transaction", "no_commitlog": "no such directory",
                "bad_option": "--grace"}[case]
    assert expected.lower() in mine[0].lower()
