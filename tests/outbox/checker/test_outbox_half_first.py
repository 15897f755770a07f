"""Half-first mode (docs/design.md §3B) on PostgreSQL against a real broker_lite."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from broker_lite.client import LocalTransactionState, Message, TransactionProducer
from outbox import PG_XID_PROPERTY, BrokerLitePublisher, Outbox, Relay, new_tx_id
from outbox.celery import CelerySettings, make_celery, rocketbox_state
from outbox.checkback_runner import CheckbackResponder
from outbox.half_first import SqlStatusListener, send_in_transaction
from outbox.models import transaction_table as t
from tests.outbox.checker.checker_support import (
    HERE,
    broker_records,
    commit_counts,
    resolution,
)
from tests.support import BrokerLiteServer, wait_until


@pytest.fixture
def outbox(pg_db: tuple[Engine, str], broker: BrokerLiteServer) -> Outbox:
    return Outbox(engine=pg_db[0], broker=broker.native, local_tx_timeout=60.0)


@pytest.fixture
def producer(outbox: Outbox) -> Iterator[TransactionProducer]:
    with TransactionProducer(outbox.producer_group, SqlStatusListener(outbox),
                             outbox.broker) as producer:
        yield producer


def _orders(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text("SELECT id FROM orders ORDER BY id")).scalars())


def _status(engine: Engine, tx_id: str) -> tuple[str, object] | None:
    with engine.connect() as conn:
        row = conn.execute(select(t.c.state, t.c.relayed_at).where(t.c.tx_id == tx_id)).first()
    return (row.state, row.relayed_at) if row else None


@pytest.mark.timeout(60)
def test_committed_work_commits_the_half_once(outbox: Outbox, producer: TransactionProducer,
                                              broker: BrokerLiteServer) -> None:
    def work(session: Session) -> str:
        session.execute(text("INSERT INTO orders (id) VALUES ('o-1')"))
        return "done"

    result = send_in_transaction(outbox, producer, Message("HalfFirst", b'{"o":1}',
                                                          tags="created"), work)
    assert result.state is LocalTransactionState.COMMIT_MESSAGE
    assert result.value == "done" and result.end_outcome == "committed"
    assert _orders(outbox.engine) == ["o-1"]
    status = _status(outbox.engine, result.tx_id)
    assert status is not None and status[0] == "COMMIT" and status[1] is not None
    # the relay, the end's backup, has nothing left to do
    publisher = BrokerLitePublisher(outbox)
    try:
        assert Relay(outbox, publisher).run_once().claimed == 0
    finally:
        publisher.close()
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {result.tx_id: 1}
    [commit] = [r for r in records if r["sysflag"] == "commit"]
    assert PG_XID_PROPERTY in commit["properties"] and commit["tag"] == "created"


@pytest.mark.timeout(60)
def test_failing_work_rolls_back_and_ends_rollback(outbox: Outbox, producer: TransactionProducer,
                                                   broker: BrokerLiteServer) -> None:
    tx_id = new_tx_id()

    def work(session: Session) -> None:
        session.execute(text("INSERT INTO orders (id) VALUES ('o-2')"))
        raise ValueError("business rule")

    with pytest.raises(ValueError, match="business rule"):
        send_in_transaction(outbox, producer, Message("HalfFirst", b"{}", msg_id=tx_id), work)
    assert _orders(outbox.engine) == [] and _status(outbox.engine, tx_id) is None
    records = broker_records(broker.data_dir)
    assert resolution(records, tx_id) == "ROLLBACK" and commit_counts(records) == {}


@pytest.mark.timeout(60)
def test_a_commit_the_database_aborts_ends_rollback(outbox: Outbox,
                                                    producer: TransactionProducer,
                                                    broker: BrokerLiteServer) -> None:
    def work(session: Session) -> None:  # the deferred unique check fails at COMMIT
        session.execute(text("INSERT INTO orders (id, ref) VALUES ('a', 'same'), "
                             "('b', 'same')"))

    result = send_in_transaction(outbox, producer, Message("HalfFirst", b"{}"), work)
    assert result.state is LocalTransactionState.ROLLBACK_MESSAGE
    assert result.end_outcome == "rolled_back" and result.value is None
    assert _orders(outbox.engine) == [] and _status(outbox.engine, result.tx_id) is None
    assert resolution(broker_records(broker.data_dir), result.tx_id) == "ROLLBACK"


@pytest.mark.timeout(60)
def test_process_killed_after_the_half_check_back_rolls_back_by_pg_xact_status(
        pg_db: tuple[Engine, str], outbox: Outbox, broker: BrokerLiteServer,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="rocketbox.checker")
    tx_id = new_tx_id()
    child = subprocess.run([sys.executable, str(HERE / "half_first_child.py"), pg_db[1],
                            broker.native, tx_id], capture_output=True, text=True, timeout=30)
    assert child.returncode == -9 and "half sent" in child.stdout, child.stderr
    with CheckbackResponder(outbox) as responder:  # local_tx_timeout is 60 s: only the xid
        wait_until(lambda: resolution(broker_records(broker.data_dir), tx_id), timeout=20)
        assert responder.checks_answered.get(LocalTransactionState.ROLLBACK_MESSAGE) == 1
    records = broker_records(broker.data_dir)
    assert resolution(records, tx_id) == "ROLLBACK" and commit_counts(records) == {}
    assert _orders(outbox.engine) == [] and _status(outbox.engine, tx_id) is None
    assert "aborted" in caplog.text


@pytest.mark.timeout(60)
def test_with_a_celery_app_the_end_goes_through_the_task(outbox: Outbox,
                                                         producer: TransactionProducer,
                                                         broker: BrokerLiteServer) -> None:
    app = make_celery(outbox, broker_url="memory://", task_always_eager=True,
                      settings=CelerySettings(sweep_interval=0))
    result = send_in_transaction(outbox, producer, Message("HalfFirst", b"{}"),
                                 lambda session: None, celery_app=app)
    assert result.end_outcome == "enqueued"
    rocketbox_state(app).close()
    status = _status(outbox.engine, result.tx_id)
    assert status is not None and status[1] is not None  # the task marked it relayed
    assert commit_counts(broker_records(broker.data_dir)) == {result.tx_id: 1}


@pytest.mark.timeout(60)
def test_seed_api_with_the_stock_sql_listener(outbox: Outbox, producer: TransactionProducer,
                                              broker: BrokerLiteServer) -> None:
    def work(session: Session) -> None:
        session.execute(text("INSERT INTO orders (id) VALUES ('seed')"))

    sent = producer.send_message_in_transaction(Message("HalfFirst", b"{}"), work)
    assert sent.local_state is LocalTransactionState.COMMIT_MESSAGE
    assert sent.end_outcome == "committed"
    assert _orders(outbox.engine) == ["seed"]
    assert _status(outbox.engine, sent.transaction_id) is not None
    failed = producer.send_message_in_transaction(Message("HalfFirst", b"{}"),
                                                  lambda s: 1 / 0)
    assert failed.local_state is LocalTransactionState.ROLLBACK_MESSAGE
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {sent.transaction_id: 1}
    assert resolution(records, failed.transaction_id) == "ROLLBACK"
