"""``rocketbox demo --target rabbitmq``: the shop through the RabbitMQ target, and both audits."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo.demo_support import processes_mentioning

REPO = Path(__file__).resolve().parents[3]
LAST_LINE = re.compile(r"demo: committed=(\d+) rolled_back=(\d+) consumed=(\d+) divergences=0$")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_the_rabbitmq_demo_ends_clean_with_the_spark_audit_on_its_export(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    work = tmp_path / "demo-rabbit"
    demo = subprocess.Popen([sys.executable, "-m", "outbox", "demo", "--quick", "--target",
                             "rabbitmq", "--spark", "on", "--dir", str(work)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = demo.communicate(timeout=600)
    finally:
        demo.kill()
    assert demo.returncode == 0, f"{stdout}\n{stderr}"
    assert "orders to rabbitmq" in stdout and "amqp://" in stdout
    match = LAST_LINE.fullmatch(stdout.strip().splitlines()[-1])
    assert match, stdout
    committed, rolled_back, consumed = map(int, match.groups())
    assert committed == consumed == 25 and rolled_back == 5
    commits = re.search(r"broker commit records\D*(\d+)", stdout)
    assert commits and int(commits.group(1)) == committed, stdout  # one message per row
    assert "Spark audit: clean" in stdout, stdout
    assert f"--broker-export {work / 'export.jsonl'}" in stdout
    assert len((work / "export.jsonl").read_text().splitlines()) == committed
    # the node (named after the demo's pid) and every part are gone
    assert processes_mentioning(f"rocketbox-test-{demo.pid}-") == []
    assert processes_mentioning(str(work)) == []
