"""A clean run through the real pipeline (publish, Relay, broker_lite) audits clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session
from support import BrokerLiteServer

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings, publish
from outbox.models import metadata
from spark.audit_job import main as audit_main

pytestmark = pytest.mark.spark

N = 2000


def _sqlite_outbox(path: Path) -> Engine:
    """SQLite with real BEGIN/SAVEPOINT (SQLAlchemy's pysqlite recipe) and the outbox tables."""
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN")

    metadata.create_all(engine)
    return engine


@pytest.mark.timeout(240)
def test_audit_clean_pipeline_has_no_divergence(spark_session: Any, tmp_path: Path,
                                                broker_lite_server: BrokerLiteServer) -> None:
    engine = _sqlite_outbox(tmp_path / "outbox.sqlite")
    outbox = Outbox(engine=engine, broker=broker_lite_server.native,
                    relay=RelaySettings(batch_size=250, broker_timeout=10.0))
    published: list[str] = []
    for start in range(0, N, 20):
        with Session(engine) as session, session.begin():
            published += [publish(session, f"Audit{i % 4}", {"i": i}, outbox=outbox,
                                  tag="t") for i in range(start, start + 20)]
    with Session(engine) as session, session.begin() as tx:  # rolled back: never sent
        publish(session, "Audit0", {"i": -1}, outbox=outbox)
        tx.rollback()
    publisher = BrokerLitePublisher(outbox)
    try:
        Relay(outbox, publisher).drain()
    finally:
        publisher.close()
    engine.dispose()

    code = audit_main(["--jdbc-url", f"jdbc:sqlite:{tmp_path / 'outbox.sqlite'}",
                       "--commitlog", str(broker_lite_server.data_dir), "--slo", "600",
                       "--json", str(tmp_path / "s.json"), "--html", str(tmp_path / "r.html"),
                       "--quiet"])
    counts = json.loads((tmp_path / "s.json").read_text())["counts"]
    assert counts == {**dict.fromkeys(counts, 0), "ok": N}
    assert code == 0
    assert len(published) == N
