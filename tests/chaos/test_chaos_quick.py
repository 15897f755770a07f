"""CI's short chaos schedule: ``bench/chaos.py --quick`` against real servers.

About a minute of load at up to 100 tx/s while the relay, the broker and the
check-back responder are killed (-9) and Redis is restarted without its data,
in a seeded order (``_chaos_faults.combined_schedule``); the run then checks
the invariant from the database, the broker's commit log and a consumer group.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
SEED = 3


def _summary(stdout: str) -> dict[str, str]:
    lines = [line for line in stdout.splitlines() if line.startswith("chaos ")]
    assert len(lines) == 1, stdout[-4000:]
    return dict(re.findall(r"(\w+)=(\S+)", lines[0]))


def test_a_short_fault_schedule_keeps_the_invariant() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "chaos.py"), "--quick", "--seed", str(SEED)],
        capture_output=True, text=True, timeout=540, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    found = _summary(done.stdout)
    assert found["faults"].split(",") != ["none"]
    assert int(found["committed"]) > 0 and int(found["rolled_back"]) > 0
    counts = {key: int(found[key]) for key in ("lost", "phantom", "duplicate", "consumer_lost")}
    assert counts == dict.fromkeys(counts, 0), done.stdout[-4000:] + done.stderr[-4000:]
