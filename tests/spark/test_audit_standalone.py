"""``rocketbox audit --master spark://...``: the audit on a Spark standalone cluster.

A master and one worker (1 core, 512 MiB), both started with pyspark's own
``spark-class`` and bound to 127.0.0.1, then the audit as a separate driver
over the shared RocketMQ 5 fixture's commit log, given as a ``file://`` URI:
the segments are listed through Hadoop by the driver and read in byte ranges
by the executor's Python workers. The processes are stopped whatever happens.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from procgroup import Process
from tests.support import free_port

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO.parent / "shared" / "fixtures" / "rocketmq5-store"
LOOPBACK = "127.0.0.1"


def _spark_class() -> Path:
    pyspark = pytest.importorskip("pyspark")
    found = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not found.is_file() or shutil.which("java") is None:
        pytest.skip("needs pyspark's bin/spark-class and java")
    return found


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "SPARK_LOCAL_IP": LOOPBACK,  # the master, the worker and the driver bind here
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_LOG_DIR": str(tmp_path / "logs"),
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
        # the executor's Python workers: this interpreter, this checkout's broker_lite
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
    })
    return env


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a running master with one registered worker."""
    spark_class = _spark_class()
    env = _env(tmp_path)
    port = free_port()
    master = Process(
        [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
         "--port", str(port), "--webui-port", str(free_port())],
        log=tmp_path / "master.log", env=env, name="spark-master")
    url = f"spark://{LOOPBACK}:{port}"
    worker = Process(
        [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
         "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", "1",
         "--memory", "512m", "--work-dir", str(tmp_path / "work"), url],
        log=tmp_path / "worker.log", env=env, name="spark-worker")
    try:
        master.start().wait_for("I have been elected leader", 120)
        worker.start().wait_for("Successfully registered with master", 120)
        yield url
    finally:
        worker.stop()
        master.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_audit_runs_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    if not (FIXTURE / "outbox.sqlite").is_file():
        message = f"the shared RocketMQ 5 fixture is not at {FIXTURE}"
        if os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}:
            pytest.fail(f"{message} (CI=true)", pytrace=False)
        pytest.skip(message)
    db = tmp_path / "outbox.sqlite"
    shutil.copyfile(FIXTURE / "outbox.sqlite", db)
    summary = tmp_path / "summary.json"
    env = _env(tmp_path)
    # the executor gets the worker's 512 MiB (Spark's floor is 450 MiB) and its one core;
    # ``pyspark-shell``: how PySpark reads spark-submit arguments when it starts the driver
    env["PYSPARK_SUBMIT_ARGS"] = ("--conf spark.executor.memory=512m "
                                  "--conf spark.cores.max=1 pyspark-shell")
    audit = Process(
        [sys.executable, "-m", "spark.audit_job", "--master", cluster,
         "--jdbc-url", f"jdbc:sqlite:{db}",
         "--commitlog", (FIXTURE / "store").as_uri(),  # file:///.../store
         "--grace", "0", "--slo", "30", "--json", str(summary), "--quiet"],
        log=tmp_path / "audit.log", env=env, cwd=REPO, name="audit")
    try:
        code = audit.start().wait(480)
    finally:
        audit.stop()
    assert code == 0, audit.tail()
    result = json.loads(summary.read_text())
    assert result["counts"]["ok"] == 360 and result["invariant_violations"] == 0
    # the work ran on the cluster: the worker started an executor for this application
    apps = list((tmp_path / "work").glob("app-*"))
    assert len(apps) == 1, list((tmp_path / "work").iterdir())
