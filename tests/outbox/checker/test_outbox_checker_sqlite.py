"""Check-back and half-first on SQLite: no xid, so age decides for a missing row."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from broker_lite.client import LocalTransactionState, Message, TransactionProducer
from outbox import PG_XID_PROPERTY, Outbox, metadata, publish
from outbox.checkback_rules import check_state
from outbox.half_first import SqlStatusListener, send_in_transaction
from tests.outbox.checker.checker_support import broker_records, commit_counts
from tests.support import BrokerLiteServer


@pytest.mark.timeout(60)
def test_sqlite_check_state_and_half_first(tmp_path: Path, broker: BrokerLiteServer) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'lite.sqlite'}")
    metadata.create_all(engine)
    outbox = Outbox(engine=engine, broker=broker.native, local_tx_timeout=5.0)
    with Session(engine) as session, session.begin():
        tx_id = publish(session, "T", {}, outbox=outbox)
    assert check_state(engine, tx_id, pg_xid=None, half_age_seconds=0,
                       local_tx_timeout=5).state == "COMMIT"
    young = check_state(engine, "missing", pg_xid=None, half_age_seconds=1, local_tx_timeout=5)
    old = check_state(engine, "missing", pg_xid=7, half_age_seconds=6, local_tx_timeout=5)
    assert (young.state, old.state) == ("UNKNOWN", "ROLLBACK")

    with TransactionProducer(outbox.producer_group, SqlStatusListener(outbox),
                             broker.native) as producer:
        result = send_in_transaction(outbox, producer, Message("Lite", b"{}"),
                                     lambda session: "ok")
    assert result.state is LocalTransactionState.COMMIT_MESSAGE
    assert result.end_outcome == "committed" and result.value == "ok"
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {result.tx_id: 1}
    assert all(PG_XID_PROPERTY not in r["properties"] for r in records)
    engine.dispose()
