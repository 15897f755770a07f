"""The check-back responder on PostgreSQL against a real broker_lite."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from sqlalchemy import Engine, event, text
from sqlalchemy.orm import Session

from broker_lite.client import LocalTransactionState
from outbox import PG_XID_PROPERTY, BrokerLitePublisher, Outbox, new_tx_id, publish
from outbox.checkback_rules import check_state
from outbox.checkback_runner import CheckbackResponder, run_checker
from outbox.targets import OutgoingMessage
from tests.outbox.checker.checker_support import broker_records, commit_counts, resolution
from tests.support import BrokerLiteServer, free_port, wait_until


@pytest.mark.timeout(30)
def test_check_state_reads_the_row_again_when_the_writer_committed_meanwhile(
        pg_db: tuple[Engine, str]) -> None:
    engine, _url = pg_db
    outbox = Outbox(engine=engine)
    writer = engine.connect()
    writer.begin()
    tx_id = publish(writer, "T", {"a": 1}, outbox=outbox)
    xid = int(writer.execute(text("SELECT pg_current_xact_id()::text::bigint")).scalar_one())

    def commit_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "pg_xact_status" in statement and writer.in_transaction():
            writer.commit()  # the writer commits between the row read and the xid check

    event.listen(engine, "before_cursor_execute", commit_first)
    try:
        answer = check_state(engine, tx_id, pg_xid=xid, half_age_seconds=0.1,
                             local_tx_timeout=60)
    finally:
        event.remove(engine, "before_cursor_execute", commit_first)
        writer.close()
    assert answer.state == "COMMIT", answer


def _half(outbox: Outbox, tx_id: str, properties: dict[str, str]) -> None:
    publisher = BrokerLitePublisher(outbox)
    try:
        [sent] = publisher.send_halves([OutgoingMessage(tx_id, "Checked", b"{}", None, (), None,
                                                        properties)])
        assert not isinstance(sent, Exception), sent
    finally:
        publisher.close()


@pytest.mark.timeout(240)  # generous: a loaded 2-core machine checks back slowly
def test_responder_answers_commit_rollback_and_unknown_from_the_table(
        pg_db: tuple[Engine, str], broker: BrokerLiteServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="rocketbox.checker")
    engine, _url = pg_db
    outbox = Outbox(engine=engine, broker=broker.native, local_tx_timeout=2.0)
    # 1. a committed row whose relay died after the half
    with Session(engine) as session, session.begin():
        committed = publish(session, "Checked", {}, outbox=outbox)
    _half(outbox, committed, {})
    # 2. a half whose DB transaction aborted, leaving no row
    aborted = new_tx_id()
    with engine.connect() as conn, conn.begin() as tx:
        aborted_xid = conn.execute(text("SELECT pg_current_xact_id()::text")).scalar_one()
        tx.rollback()
    _half(outbox, aborted, {PG_XID_PROPERTY: aborted_xid})
    # 3. a half whose DB transaction is still running (then commits its row)
    running = new_tx_id()
    long_tx = engine.connect()
    long_tx.begin()
    running_xid = long_tx.execute(text("SELECT pg_current_xact_id()::text")).scalar_one()
    _half(outbox, running, {PG_XID_PROPERTY: running_xid})
    # 4. no row, no xid (SQLite-like): rolled back once older than local_tx_timeout
    ageless = new_tx_id()
    _half(outbox, ageless, {})

    with CheckbackResponder(outbox) as responder:
        def resolved(*ids: str) -> bool:
            records = broker_records(broker.data_dir)
            return all(resolution(records, tx) for tx in ids)
        wait_until(lambda: resolved(committed, aborted, ageless), timeout=90)
        assert responder.checks_answered.get(LocalTransactionState.UNKNOW, 0) >= 1
        records = broker_records(broker.data_dir)
        assert resolution(records, running) is None  # still running: UNKNOWN, asked again
        publish(long_tx, "Checked", {}, outbox=outbox, tx_id=running)
        long_tx.commit()
        long_tx.close()
        wait_until(lambda: resolved(running), timeout=90)
    records = broker_records(broker.data_dir)
    assert resolution(records, committed) == "COMMIT"
    assert resolution(records, running) == "COMMIT"
    assert resolution(records, aborted) == "ROLLBACK"
    assert resolution(records, ageless) == "ROLLBACK"
    assert commit_counts(records) == {committed: 1, running: 1}
    assert f"transaction {aborted_xid} aborted" in caplog.text
    assert f"transaction {running_xid} still running" in caplog.text


@pytest.mark.timeout(30)
def test_run_checker_retries_an_unreachable_broker_and_stops_on_request(
        pg_db: tuple[Engine, str], broker: BrokerLiteServer) -> None:
    engine, _url = pg_db
    results: list[int] = []
    dead = Outbox(engine=engine, broker=f"127.0.0.1:{free_port()}")
    stop = threading.Event()
    thread = threading.Thread(target=lambda: results.append(
        run_checker(dead, stop=stop, retry_interval=0.05)))
    thread.start()
    wait_until(lambda: thread.is_alive(), timeout=5)
    stop.set()
    thread.join(10)
    assert results == [0]

    ready = threading.Event()
    stop = threading.Event()
    live = Outbox(engine=engine, broker=broker.native)
    thread = threading.Thread(target=lambda: results.append(
        run_checker(live, stop=stop, on_ready=ready.set)))
    started = time.monotonic()
    thread.start()
    assert ready.wait(10)
    stop.set()
    thread.join(10)
    assert results == [0, 0] and time.monotonic() - started < 10
