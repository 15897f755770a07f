"""Legitimate work with the ACL on: the outbox demo, its relay, check-back responder and
inventory consumer each signed as an account of their own with only what it needs
(``rocketbox demo --acl``), to broker_lite's native door and, through the official
RocketMQ client, to its gRPC door as a RocketMQ proxy."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(r"demo: committed=(\d+) rolled_back=(\d+) consumed=(\d+) divergences=0$")


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("target", ["broker-lite", pytest.param("rocketmq-proxy",
                                                                  marks=pytest.mark.grpc)])
def test_the_demo_runs_with_one_account_per_part(tmp_path: Path, target: str) -> None:
    work = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--quick", "--acl",
                           "--spark", "off", "--target", target, "--dir", str(work)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    match = LAST_LINE.fullmatch(done.stdout.strip().splitlines()[-1])
    assert match, done.stdout
    committed, rolled_back, consumed = map(int, match.groups())
    assert committed == consumed == 25 and rolled_back == 5
    accounts = {a["access_key"]: a for a in json.loads((work / "acl.json").read_text())
                ["accounts"]}
    assert set(accounts) == {"admin", "relay", "checker", "inventory"}
    assert not any(a["admin"] for k, a in accounts.items() if k != "admin")
    logs = "".join(p.read_text(errors="replace") for p in (work / "logs").glob("*.log"))
    assert "NO_PERMISSION" not in logs and "may not" not in logs
