"""Rows the outbox still owes are `parked` or `undelivered`, never `lost` (issue 13).

The pipeline is real (PostgreSQL, ``publish``, ``Relay`` with
``BrokerLitePublisher``, a ``broker-lite serve`` process). ``lost`` comes from
a real cause: the audit reads a copy of the commit log taken before the last
relays (a broker restored from a backup). The unreachable broker's rows come
from a real relay pass against a closed port; the parked and retrying rows
carry the bookkeeping ``Relay._record`` writes after per-row refusals.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, select, text, update
from sqlalchemy.orm import Session

from outbox import Outbox, RelaySettings, publish
from outbox.models import metadata
from outbox.models import transaction_table as t
from spark.audit_job import main as audit_main
from tests.support import BrokerLiteServer, PostgresServer, free_port
from tests.support.publishers import drain

pytestmark = pytest.mark.spark


def _publish(outbox: Outbox, n: int, label: str) -> list[str]:
    with Session(outbox.engine) as session, session.begin():
        return [publish(session, "Owed", {label: i}, outbox=outbox) for i in range(n)]


def _relay(outbox: Outbox) -> int:
    return drain(outbox).relayed


def _mark(engine: Engine, tx_ids: list[str], **values: Any) -> None:
    with engine.begin() as conn:
        assert conn.execute(update(t).where(t.c.tx_id.in_(tx_ids)).values(**values)) \
            .rowcount == len(tx_ids)


def _audit(spark_session: Any, url: str, user: str, commitlog: Path, tmp: Path,
           *rules: str) -> tuple[int, dict[str, Any], dict[str, dict[str, Any]]]:
    as_of = (datetime.now(UTC) + timedelta(seconds=120)).isoformat()
    code = audit_main(["--jdbc-url", url, "--user", user, "--commitlog", str(commitlog),
                       "--slo", "600", "--stuck-after", "600", "--as-of", as_of, *rules,
                       "--out", str(tmp / "out"), "--json", str(tmp / "s.json"), "--quiet"])
    rows = {r["tx_id"]: r.asDict() for r in spark_session.read.parquet(str(tmp / "out"))
            .collect()}
    return code, json.loads((tmp / "s.json").read_text()), rows


@pytest.mark.timeout(600)  # starts Spark when first; two audits; minutes on a loaded machine
def test_audit_reports_owed_rows_as_parked_or_undelivered_and_relayed_ones_as_lost(
        spark_session: Any, postgres_server: PostgresServer,
        broker_lite_server: BrokerLiteServer, tmp_path: Path) -> None:
    db = postgres_server.create_database(f"owed_{uuid.uuid4().hex[:10]}")
    engine = create_engine(db.url)
    metadata.create_all(engine)
    with engine.begin() as conn:  # what the migration adds beside the tables
        conn.execute(text("CREATE SEQUENCE IF NOT EXISTS rocketbox_transaction_seq"))
    outbox = Outbox(engine=engine, broker=broker_lite_server.native,
                    relay=RelaySettings(broker_timeout=10.0))
    ok = _publish(outbox, 20, "ok")
    assert _relay(outbox) == 20
    restored = tmp_path / "restored"  # the broker's commit log as a backup held it
    shutil.copytree(broker_lite_server.data_dir / "commitlog", restored / "commitlog")
    lost = _publish(outbox, 5, "lost")
    assert _relay(outbox) == 5  # relayed, so the outbox believes they are in the broker

    parked = _publish(outbox, 3, "parked")
    _mark(engine, parked, attempts=10, parked=True,
          last_error="no PUB permission on topic 'Owed'")
    retrying = _publish(outbox, 3, "retrying")
    _mark(engine, retrying, attempts=2, last_error="topic 'Owed' is not writable",
          next_attempt_at=datetime.now(UTC) + timedelta(seconds=30))
    unreachable = _publish(outbox, 2, "unreachable")  # the relay tried, the broker was gone
    gone = Outbox(engine=engine, broker=f"127.0.0.1:{free_port()}",
                  relay=RelaySettings(broker_timeout=2.0))
    with contextlib.suppress(Exception):
        _relay(gone)
    never = _publish(outbox, 2, "never")  # no relay ran at all
    with engine.connect() as conn:
        owed = conn.execute(select(t.c.tx_id).where(t.c.relayed_at.is_(None))).scalars().all()
    assert set(owed) == {*parked, *retrying, *unreachable, *never}

    url = f"jdbc:postgresql://{db.host}:{db.port}/{db.dbname}"
    code, summary, rows = _audit(spark_session, url, db.user, restored, tmp_path / "a",
                                 "--grace", "60")
    engine.dispose()
    assert code == 1
    assert {tx: r["reason"] for tx, r in rows.items()} == {
        **dict.fromkeys(lost, "lost"), **dict.fromkeys(parked, "parked"),
        **dict.fromkeys([*retrying, *unreachable, *never], "undelivered")}
    assert summary["counts"] == {**dict.fromkeys(summary["counts"], 0), "ok": len(ok),
                                 "lost": 5, "parked": 3, "undelivered": 7}
    assert summary["invariant_violations"] == 5  # only `lost` breaks the invariant here
    assert [a["category"] for a in summary["needs_action"]] == ["lost", "parked",
                                                               "undelivered"]
    assert "rocketbox replay" in summary["needs_action"][1]["action"]
    for tx in parked:
        assert rows[tx]["attempts"] == 10
        assert rows[tx]["detail"] == ("parked after 10 attempt(s): no PUB permission on "
                                      "topic 'Owed'")
    for tx in retrying:
        assert "2 failed attempt(s), next at" in rows[tx]["detail"]
        assert rows[tx]["detail"].endswith("last error: topic 'Owed' is not writable")
    for tx in never:
        assert rows[tx]["detail"].endswith("no attempt counted")
    for tx in lost:
        assert rows[tx]["relayed_ms"] is not None and "relayed at" in rows[tx]["detail"]

    # a grace longer than their age: owed rows are in flight, but a parked row never is
    code, summary, rows = _audit(spark_session, url, db.user, restored, tmp_path / "b",
                                 "--grace", "100000")
    assert code == 1
    assert {tx: r["reason"] for tx, r in rows.items()} == dict.fromkeys(parked, "parked")
    assert summary["counts"]["pending"] == 5 + 7
