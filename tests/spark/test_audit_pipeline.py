"""The audit against real runs of the pipeline (publish, Relay, broker_lite).

A clean run audits clean. Faulty runs, where the fault is made by the real
pipeline or by a real change to its inputs afterwards (not by writing records
by hand, as ``audit_seed`` does), are reported for exactly the tx_ids hit.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, delete, select, update
from sqlalchemy.orm import Session

from broker_lite.client import LocalTransactionState, ReceivedMessage, TransactionProducer
from outbox import Outbox, RelaySettings, publish
from outbox.models import transaction_table as t
from spark.audit_job import main as audit_main
from tests.support import BrokerLiteServer, double_commit_broker, start_broker_lite, wait_until
from tests.support.publishers import drain
from tests.support.sqlite import sqlite_outbox_engine

pytestmark = pytest.mark.spark

N_CLEAN = 10_000
N_FAULTY = 120
# every row is older than --grace at the audit's "now"; nothing is late
RULES = ["--grace", "0", "--slo", "600", "--stuck-after", "600"]


@dataclass
class Run:
    """One run of the pipeline: its database and the tx_ids it committed."""

    db: Path
    engine: Engine
    commitlog: Path
    published: list[str]
    outbox: Outbox


@contextmanager
def _pipeline(tmp_path: Path, broker: BrokerLiteServer, n: int, *,
              per_db_tx: int) -> Iterator[Run]:
    """Publish ``n`` messages in DB transactions of ``per_db_tx``, then relay them all."""
    db = tmp_path / "outbox.sqlite"
    engine = sqlite_outbox_engine(db)
    outbox = Outbox(engine=engine, broker=broker.native,
                    relay=RelaySettings(batch_size=min(n, 2000), broker_timeout=30.0))
    published: list[str] = []
    for start in range(0, n, per_db_tx):
        with Session(engine) as session, session.begin():
            published += [publish(session, f"Audit{i % 4}", {"i": i}, outbox=outbox, tag="t")
                          for i in range(start, min(n, start + per_db_tx))]
    with Session(engine) as session, session.begin() as tx:  # rolled back: never sent
        publish(session, "Audit0", {"i": -1}, outbox=outbox)
        tx.rollback()
    report = drain(outbox)
    assert (report.relayed, report.failed) == (n, 0), report.errors[:5]
    try:
        yield Run(db, engine, broker.data_dir, published, outbox)
    finally:
        engine.dispose()


def _audit(spark_session: Any, tmp_path: Path, run: Run,
           *extra: str) -> tuple[int, dict[str, int], dict[str, str]]:
    """Run the audit job; returns its exit code, counts and {tx_id: reason} of divergent rows."""
    out, summary = tmp_path / "divergent", tmp_path / "summary.json"
    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{run.db}", "--commitlog", str(run.commitlog),
                       *RULES, *extra, "--out", str(out), "--json", str(summary), "--quiet"])
    counts: dict[str, int] = json.loads(summary.read_text())["counts"]
    divergent = {r["tx_id"]: r["reason"] for r in
                 spark_session.read.parquet(str(out)).select("tx_id", "reason").collect()}
    return code, counts, divergent


def _only(counts: dict[str, int], **expected: int) -> dict[str, int]:
    return {**dict.fromkeys(counts, 0), **expected}


@pytest.mark.timeout(300)
def test_audit_clean_pipeline_10k_has_no_divergence(spark_session: Any, tmp_path: Path,
                                                    broker_lite_server: BrokerLiteServer) -> None:
    with _pipeline(tmp_path, broker_lite_server, N_CLEAN, per_db_tx=1000) as run:
        code, counts, divergent = _audit(spark_session, tmp_path, run,
                                         "--html", str(tmp_path / "r.html"))
    assert counts == _only(counts, ok=N_CLEAN)
    assert divergent == {}
    assert code == 0
    assert len(set(run.published)) == N_CLEAN


def _delete(conn: Connection, tx_id: str) -> int:
    return conn.execute(delete(t).where(t.c.tx_id == tx_id)).rowcount


def _tamper(conn: Connection, tx_id: str) -> int:
    return conn.execute(update(t).where(t.c.tx_id == tx_id)
                        .values(body=b'{"i": "tampered"}')).rowcount


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("index", "change", "reason"), [
    pytest.param(57, _delete, "phantom", id="deleted_after_its_commit_is_phantom"),
    pytest.param(3, _tamper, "payload_mismatch",
                 id="body_changed_after_relaying_is_payload_mismatch"),
])
def test_audit_reports_a_row_changed_after_relaying(
        spark_session: Any, tmp_path: Path, broker_lite_server: BrokerLiteServer, index: int,
        change: Callable[[Connection, str], int], reason: str) -> None:
    with _pipeline(tmp_path, broker_lite_server, N_FAULTY, per_db_tx=40) as run:
        victim = run.published[index]
        with run.engine.begin() as conn:
            assert change(conn, victim) == 1
        code, counts, divergent = _audit(spark_session, tmp_path, run)
    assert divergent == {victim: reason}
    assert counts == _only(counts, ok=N_FAULTY - 1, **{reason: 1})
    assert code == 1


_DOUBLED = re.compile(r"fault hook: commit of (\S+) written twice")


@pytest.mark.timeout(120)
def test_audit_reports_commits_forced_twice_by_the_broker_as_duplicate(
        spark_session: Any, tmp_path: Path) -> None:
    every = 13
    with start_broker_lite(tmp_path / "broker", command=double_commit_broker.command(every)
                           ) as broker, \
            _pipeline(tmp_path, broker, N_FAULTY, per_db_tx=40) as run:
        # the broker's own word on which commits it wrote twice
        doubled = set(_DOUBLED.findall(broker.stderr_text()))
        assert len(doubled) == N_FAULTY // every
        assert doubled <= set(run.published)
        code, counts, divergent = _audit(spark_session, tmp_path, run)
    assert divergent == dict.fromkeys(doubled, "duplicate")
    assert counts == _only(counts, ok=N_FAULTY - len(doubled), duplicate=len(doubled))
    assert code == 1


class _NeverDecides:
    """A check-back listener of the outbox's group that cannot tell: it answers UNKNOWN.

    broker_lite counts a check only when a producer of the group is online to
    receive it (a half with nobody to ask is never discarded), so this stands
    for a checker that is up but cannot resolve anything.
    """

    def execute_local_transaction(self, msg: Any, arg: Any) -> LocalTransactionState:
        raise AssertionError("this producer sends nothing")

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


@pytest.mark.timeout(120)
def test_audit_reports_halves_of_a_killed_relay_discarded_by_the_broker(
        spark_session: Any, tmp_path: Path) -> None:
    n_killed = 12
    tx_args = ["--tx-timeout", "1", "--tx-check-interval", "0.3", "--tx-check-max", "2"]
    with start_broker_lite(tmp_path / "broker", tx_args) as broker, \
            _pipeline(tmp_path, broker, N_FAULTY, per_db_tx=40) as run:
        with Session(run.engine) as session, session.begin():
            killed = [publish(session, "Audit1", {"killed": i}, outbox=run.outbox)
                      for i in range(n_killed)]
        checker = TransactionProducer(run.outbox.producer_group, _NeverDecides(),
                                      broker.native, client_id="never-decides")
        checker.start()
        try:
            marker = tmp_path / "halves-sent"
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
            child = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("relay_child.py")), str(run.db),
                 broker.native, str(marker)], env=env, stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE, start_new_session=True)
            try:
                def halves_sent() -> bool:
                    if child.poll() is not None:
                        err = child.stderr.read().decode() if child.stderr else ""
                        raise AssertionError(f"relay child exited with {child.returncode}: {err}")
                    return marker.exists() and marker.read_text().endswith("\n")
                wait_until(halves_sent, timeout=30, message="relay child sent no halves")
            finally:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait(10)
                if child.stderr is not None:
                    child.stderr.close()
            assert marker.read_text() == f"{n_killed}\n"
            wait_until(lambda: broker.stderr_text().count("discarded to") >= n_killed,
                       timeout=30, message=lambda: "halves not discarded; broker log:\n"
                       + broker.stderr_text()[-3000:])
        finally:
            checker.shutdown()
        with run.engine.connect() as conn:  # the DB says COMMIT: the divergence to surface
            left = conn.execute(select(t.c.state, t.c.claimed_by.is_not(None), t.c.relayed_at)
                                .where(t.c.tx_id.in_(killed))).all()
        assert [tuple(r) for r in left] == [("COMMIT", True, None)] * n_killed  # still claimed
        code, counts, divergent = _audit(spark_session, tmp_path, run)
    assert divergent == dict.fromkeys(killed, "discarded")
    assert counts == _only(counts, ok=N_FAULTY, discarded=n_killed)
    assert code == 1
