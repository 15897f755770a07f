"""The Spark audit after ``rocketbox demo --target rocketmq-proxy``: clean means clean.

The demo relays through broker_lite's strict proxy mode (the official RocketMQ
client, one proxy transaction id per half, the row's key in
``ROCKETBOX_TX_ID``) and its relay is kill -9'd between a half and its end.
Its own Spark audit judges every row (``--grace 0``), and a ``rocketbox
audit`` run afterwards over its files agrees with it: the exact command the
demo prints, and a plain ``--grace 0`` audit (the default ``--slo`` may call
rows late, never lost or phantom). Then a foreign producer leaves a stray half
carrying a committed row's ``ROCKETBOX_TX_ID`` and never ends it: still no
invariant violation.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.demo.demo_support import processes_mentioning
from tests.support import start_broker_lite

REPO = Path(__file__).resolve().parents[2]
LAST_LINE = re.compile(r"demo: committed=(\d+) rolled_back=(\d+) consumed=(\d+) divergences=0$")


def _audit(argv: list[str], summary: Path) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run([sys.executable, "-m", "outbox", "audit", *argv,
                           "--json", str(summary), "--quiet"], cwd=REPO,
                          capture_output=True, text=True, timeout=400)
    assert done.stdout == "", done.stdout  # --quiet: nothing on stdout
    data = json.loads(summary.read_text()) if summary.exists() else {}
    return done.returncode, data, done.stderr


def _stray_half(data_dir: Path, topic: str, tx_id: str) -> None:
    """A foreign official-client producer sends a half keyed ``tx_id`` and never ends it."""
    from rocketmq import ClientConfiguration, Credentials, Message, Producer, TransactionChecker

    class Unsure(TransactionChecker):  # type: ignore[misc]
        def check(self, message: Any) -> int:
            return 0  # TRANSACTION_RESOLUTION_UNSPECIFIED: not this producer's to decide

    # no check-back before the broker stops: the half stays open in the store
    with start_broker_lite(data_dir, ["--grpc-proxy-semantics", "--tx-timeout", "600"]) as srv:
        producer = Producer(ClientConfiguration(srv.grpc, Credentials("", "")), (topic,),
                            checker=Unsure())
        producer.startup()
        try:
            msg = Message()
            msg.topic, msg.body, msg.keys = topic, b'{"stray": true}', "stray"
            msg.add_property("ROCKETBOX_TX_ID", tx_id)
            producer.send(msg, producer.begin_transaction())
        finally:
            producer.shutdown()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.grpc
@pytest.mark.timeout(900)
def test_audit_after_the_rocketmq_proxy_demo_agrees_with_it(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    work = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "outbox", "demo", "--quick", "--target",
                           "rocketmq-proxy", "--spark", "on", "--dir", str(work)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert LAST_LINE.fullmatch(done.stdout.strip().splitlines()[-1]), done.stdout
    kills = re.search(r"relay kills \(between half and commit\)\D*(\d+)", done.stdout)
    assert kills and int(kills.group(1)) >= 1, done.stdout  # SIGKILL between half and end
    assert "Spark audit: clean" in done.stdout, done.stdout
    again = re.search(r"^audit it again: (rocketbox audit .*)$", done.stdout, re.MULTILINE)
    assert again, done.stdout
    argv = shlex.split(again.group(1))[2:]
    assert argv[argv.index("--grace") + 1] == "0" and "--as-of" in argv
    assert processes_mentioning(str(work)) == []

    code, printed, stderr = _audit(argv, tmp_path / "again.json")
    assert code == 0 and printed["divergent"] == 0, stderr
    assert printed["counts"]["ok"] == 25 and printed["counts"]["pending"] == 0

    plain = ["--jdbc-url", f"jdbc:sqlite:{work / 'shop.sqlite'}",
             "--commitlog", str(work / "broker"), "--grace", "0"]
    code, summary, stderr = _audit(plain, tmp_path / "plain.json")
    assert code in (0, 1) and summary["invariant_violations"] == 0, stderr
    counts = summary["counts"]
    assert counts["ok"] + counts["late"] == 25 and counts["pending"] == 0, counts

    tx_id = sorted(_committed(work))[0]
    _stray_half(work / "broker", "Orders", tx_id)
    code, stray, stderr = _audit(argv, tmp_path / "stray.json")
    assert stray["invariant_violations"] == 0 and code == 0, stderr
    assert stray["counts"]["ok"] == 25
    assert _halves_keyed(work / "broker", tx_id) >= 2  # the stray one is there


def _committed(work: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(work / "shop.sqlite") as conn:
        return [r[0] for r in conn.execute(
            "SELECT tx_id FROM rocketbox_transaction WHERE state = 'COMMIT'")]


def _halves_keyed(data_dir: Path, tx_id: str) -> int:
    from spark.segments import KIND_HALF, decode_segment

    return sum(1 for segment in sorted((data_dir / "commitlog").iterdir())
               for row in decode_segment(segment.name, segment.read_bytes())
               if row[0] == KIND_HALF and row[3] == tx_id)


@pytest.mark.timeout(60)
def test_the_spark_lines_are_whole_on_a_narrow_terminal() -> None:
    from examples.demo.audit import print_spark

    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=False)
    why = ("skipped: the SQLite JDBC driver /usr/share/java/sqlite-jdbc.jar is missing: install "
           "it with `apt-get install -y libxerial-sqlite-jdbc-java`")
    again = "rocketbox audit --jdbc-url jdbc:sqlite:/x/shop.sqlite --grace 0 --slo 6.3"
    print_spark(console, why, again)
    assert out.getvalue().splitlines() == [f"Spark audit: {why}", f"audit it again: {again}"]


@pytest.mark.timeout(60)
def test_a_missing_jdbc_driver_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    import shutil

    import spark.session
    from examples.demo.audit import spark_available

    if shutil.which("java") is None:
        pytest.skip("needs java on PATH (the driver is looked for after it)")
    monkeypatch.setattr(spark.session, "DEFAULT_JARS",
                        (str(tmp_path / "postgresql.jar"), str(tmp_path / "sqlite-jdbc.jar")))
    why = spark_available()
    assert why is not None and "\n" not in why
    assert why.endswith("`apt-get install -y libxerial-sqlite-jdbc-java` (as root; or "
                        "`make system-deps`)")
