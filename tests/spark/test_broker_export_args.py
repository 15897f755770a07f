"""``--broker-export`` and ``--commitlog``: exactly one, checked before Spark starts.

Each case runs the job in a child process and asks it afterwards whether
PySpark ever launched its JVM gateway: the usage error must come without it,
in one line naming the argument (and, for a bad export line, the file, the
line and the field).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from outbox.broker_export import ExportedMessage, body_sha256, write_export
from tests.spark.audit_probe import probe
from tests.spark.audit_seed import sqlite_engine, write_status

pytestmark = pytest.mark.spark



@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    """A SQLite status table, a broker data dir, a good export, a bad one, an empty dir."""
    engine = sqlite_engine(tmp_path / "status.sqlite")
    write_status(engine, [])
    engine.dispose()
    (tmp_path / "broker" / "commitlog").mkdir(parents=True)
    good = ExportedMessage(tx_id="tx-1", position="ORDERS:1", time_ms=1764316800123,
                           body_sha256=body_sha256(b"{}"), destination="orders")
    write_export([good], tmp_path / "good.jsonl")
    line = {"tx_id": "tx-2", "position": "ORDERS:2", "time_ms": "soon",
            "body_sha256": body_sha256(b"{}"), "destination": "orders"}
    (tmp_path / "bad").mkdir()
    write_export([good], tmp_path / "bad" / "a.jsonl")
    (tmp_path / "bad" / "b.jsonl").write_text(
        (tmp_path / "good.jsonl").read_text() + json.dumps(line) + "\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no export here")
    return tmp_path


_CASES: dict[str, tuple[list[str], str]] = {
    # case: (the broker-side arguments, what the one line must say)
    "both": (["--commitlog", "{tmp}/broker", "--broker-export", "{tmp}/good.jsonl"],
             "give --commitlog DIR (broker_lite, RocketMQ) or --broker-export PATH (any other "
             "target), not both"),
    "neither": ([], "the broker's side is missing: give --commitlog DIR (broker_lite, RocketMQ)"
                    " or --broker-export PATH (any other target)"),
    "missing": (["--broker-export", "{tmp}/nowhere.jsonl"],
                "--broker-export: no such file or directory: {tmp}/nowhere.jsonl"),
    "no_jsonl": (["--broker-export", "{tmp}/empty"],
                 "--broker-export: {tmp}/empty holds no *.jsonl file"),
    "bad_line": (["--broker-export", "{tmp}/bad"],
                 "--broker-export: {tmp}/bad/b.jsonl: line 2 (time_ms): time_ms must be an "
                 "integer (ms since the epoch), not str"),
    "state": (["--broker-export", "{tmp}/good.jsonl", "--state", "{tmp}/state"],
              "--state works with --commitlog only"),
}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", sorted(_CASES))
def test_the_broker_side_is_one_readable_input_or_exit_2_before_spark(tmp: Path,
                                                                     case: str) -> None:
    given, expected = _CASES[case]
    done = probe("--jdbc-url", f"jdbc:sqlite:{tmp / 'status.sqlite'}", "--quiet",
                  *(a.format(tmp=tmp) for a in given))
    assert done.returncode == 2, done.stderr
    assert done.stdout == "gateway: None\n"  # PySpark never launched its JVM
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rocketbox audit: ")
    assert expected.format(tmp=tmp) in lines[0]
