"""``rocketbox demo --quick``: the end-to-end demo as CI runs it, twice in one directory."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo.demo_support import processes_mentioning

REPO = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(r"demo: committed=(\d+) rolled_back=(\d+) consumed=(\d+) divergences=0$")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_quick_passes_twice_and_leaves_no_process(tmp_path: Path) -> None:
    work = tmp_path / "demo-run"
    for attempt in (1, 2):
        done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--quick", "--dir",
                               str(work)], cwd=REPO, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, f"attempt {attempt}:\n{done.stdout}\n{done.stderr}"
        last = done.stdout.strip().splitlines()[-1]
        match = LAST_LINE.fullmatch(last)
        assert match, last
        committed, rolled_back, consumed = map(int, match.groups())
        assert committed == consumed == 25 and rolled_back == 5
        table_kills = re.search(r"relay kills \(between half and commit\)\D*(\d+)",
                                done.stdout)
        assert table_kills, done.stdout
        progress_kills = re.findall(r"(\d+) relay kills", done.stdout)
        assert progress_kills and set(progress_kills[-2:]) == {table_kills.group(1)}, \
            done.stdout  # the progress lines' last count is the table's
        assert processes_mentioning(str(work)) == []


@pytest.mark.slow
@pytest.mark.grpc
@pytest.mark.timeout(300)
def test_demo_quick_to_a_rocketmq_proxy_ends_with_the_same_line(tmp_path: Path) -> None:
    """``--target rocketmq-proxy``: the official client, strict proxy mode, the same audit.

    The kill between half and end leaves a half the proxy cannot end; the next
    relay sends the row again, and the old half must not become a second message.
    """
    work = tmp_path / "demo-rmq"
    done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--quick", "--target",
                           "rocketmq-proxy", "--dir", str(work)], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "orders to rocketmq-proxy" in done.stdout and "rocketmq://" in done.stdout
    match = LAST_LINE.fullmatch(done.stdout.strip().splitlines()[-1])
    assert match, done.stdout
    committed, rolled_back, consumed = map(int, match.groups())
    assert committed == consumed == 25 and rolled_back == 5
    commits = re.search(r"broker commit records\D*(\d+)", done.stdout)
    assert commits and int(commits.group(1)) == committed, done.stdout
    assert processes_mentioning(str(work)) == []


@pytest.mark.timeout(30)
def test_demo_rejects_bad_arguments() -> None:
    done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--orders", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--orders must be >= 1" in done.stderr
