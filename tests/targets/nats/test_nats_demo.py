"""``rocketbox demo --target nats``: a private nats-server, the relay killed between the
stream's ack and the mark, the inventory through ``NatsInbox``, both audits over the
stream's export, and the demo's last line with ``divergences=0``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo.demo_support import processes_mentioning
from tests.support.nats_server import find_nats_server
from tests.support.servers import ServerUnavailable

REPO = Path(__file__).resolve().parents[3]
LAST_LINE = re.compile(r"demo: committed=(\d+) rolled_back=(\d+) consumed=(\d+) divergences=0$")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_the_nats_demo_ends_clean_with_its_spark_audit(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    try:
        find_nats_server()
    except ServerUnavailable as exc:  # as the server fixtures: a skip here, a failure in CI
        if os.environ.get("CI", "").lower() in {"true", "1", "yes"}:
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    work = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--quick", "--target",
                           "nats", "--spark", "on", "--dir", str(work)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "orders to nats" in done.stdout and "nats://127.0.0.1:" in done.stdout
    match = LAST_LINE.fullmatch(done.stdout.strip().splitlines()[-1])
    assert match, done.stdout
    committed, rolled_back, consumed = map(int, match.groups())
    assert committed == consumed == 25 and rolled_back == 5
    kills = re.search(r"relay kills \(between half and commit\)\D*(\d+)", done.stdout)
    assert kills and int(kills.group(1)) >= 1, done.stdout
    commits = re.search(r"broker commit records\D*(\d+)", done.stdout)
    assert commits and int(commits.group(1)) == committed, done.stdout  # no re-send stored
    assert "Spark audit: clean" in done.stdout, done.stdout
    assert "--broker-export" in done.stdout
    assert (work / "nats-export.jsonl").read_text().count("\n") == committed
    assert processes_mentioning(str(work)) == []
