"""The embedded setup: SQLite, Celery on kombu's SQLAlchemy transport, a real worker.

The worker is started through ``run_worker`` (what ``rocketbox relay`` runs),
with its sweeper lane; the web side enqueues through the same SQLite-backed queue.
"""

from __future__ import annotations

import dataclasses
import signal
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from outbox import Outbox, metadata, publish
from outbox.celery import CelerySettings, celery_on_commit, make_celery
from tests.outbox.celery.rocketbox_celery_support import (
    app_env,
    broker_records,
    commit,
    commit_counts,
    module_entry,
    wait_relayed,
)
from tests.support import BrokerLiteServer


@pytest.mark.timeout(90)
def test_sqlite_and_sqla_transport_relay_commits_once_and_rollbacks_never(
        broker: BrokerLiteServer, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    queue_url = f"sqla+sqlite:///{tmp_path / 'celery.sqlite'}"
    engine = create_engine(db_url, connect_args={"timeout": 30})
    metadata.create_all(engine)
    outbox = Outbox(engine=engine, broker=broker.native)
    app = make_celery(outbox, broker_url=queue_url,
                      settings=CelerySettings(sweep_interval=0, polling_interval=0.05))
    outbox = dataclasses.replace(outbox, on_commit=celery_on_commit(app))
    env = app_env(db=db_url, broker=broker.native, celery_broker=queue_url, tmp=tmp_path,
                  RB_TEST_SWEEP="1")
    try:
        with module_entry("lite-worker", "worker", env, tmp_path) as worker:
            ids = commit(engine, outbox, 5, "Embedded", message_group="g")
            with Session(engine) as session, session.begin() as tx:
                never = publish(session, "Embedded", {"x": 1}, outbox=outbox)
                tx.rollback()
            wait_relayed(engine, set(ids), worker, timeout=30)
            assert "rocketbox.relay" in worker.log_text()
            # SIGTERM: a warm shutdown, and run_worker returns 0
            assert worker.kill(signal.SIGTERM, timeout=20) == 0
    finally:
        engine.dispose()
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx: 1 for tx in ids}
    assert [r["transaction_id"] for r in records if r["sysflag"] == "commit"] == ids
    assert all(r["transaction_id"] != never for r in records)
