"""The inbox: a redelivered message is dropped; a failed handler rolls back and retries."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session

from broker_lite.client import ConsumeResult, ReceivedMessage
from outbox import BrokerLitePublisher, ConfigurationError, Outbox, Relay, publish
from outbox.inbox import InboxConsumer, consumer
from outbox.models import inbox_table, metadata
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until
from tests.support.outbox_db import pg_outbox_database

HERE = Path(__file__).resolve().parent
FAST_BROKER = ("--tx-timeout", "1", "--tx-check-interval", "0.3", "--delay-time-scale", "0.01")


@pytest.fixture
def pg_db(postgres_server: PostgresServer) -> Iterator[tuple[Engine, str]]:
    with pg_outbox_database(postgres_server, "rbi", extra_sql=(
            "CREATE TABLE processed (tx_id text PRIMARY KEY, body text)",)) as db:
        yield db


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerLiteServer]:
    with start_broker_lite(tmp_path / "broker", FAST_BROKER) as server:
        yield server


def _send(engine: Engine, broker: str, topic: str, body: object) -> str:
    """Publish through the outbox and relay it, as the real path does."""
    outbox = Outbox(engine=engine, broker=broker)
    with Session(engine) as session, session.begin():
        tx_id = publish(session, topic, body, outbox=outbox)
    publisher = BrokerLitePublisher(outbox)
    try:
        assert Relay(outbox, publisher).run_once().relayed == 1
    finally:
        publisher.close()
    return tx_id


def _count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.mark.timeout(60)
def test_a_message_redelivered_after_a_crash_before_the_ack_is_dropped(
        pg_db: tuple[Engine, str], broker: BrokerLiteServer, tmp_path: Path) -> None:
    engine, url = pg_db
    tx_id = _send(engine, broker.native, "Inbox", {"order": 7})
    marker = tmp_path / "crashed"
    argv = [sys.executable, str(HERE / "inbox_child.py"), url, broker.native, "Inbox",
            "billing", str(marker)]
    first = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert first.returncode == -9, first.stderr[-3000:]
    assert marker.read_text() == tx_id
    assert _count(engine, "processed") == 1 and _count(engine, "rocketbox_inbox") == 1

    log = tmp_path / "second.log"
    with log.open("wb") as out:
        second = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: f"{tx_id} already processed; skipped" in log.read_text(),
                   timeout=20, message=lambda: log.read_text()[-3000:])
    finally:
        second.kill()
        second.wait(10)
    assert _count(engine, "processed") == 1
    with engine.connect() as conn:
        row = conn.execute(select(inbox_table)).one()
    assert (row.consumer_group, row.tx_id) == ("billing", tx_id)


@pytest.mark.timeout(60)
def test_a_failing_handler_rolls_back_and_the_message_comes_back(
        pg_db: tuple[Engine, str], broker: BrokerLiteServer) -> None:
    engine, _url = pg_db
    tx_id = _send(engine, broker.native, "Flaky", "payload")
    deliveries: list[int] = []
    done = threading.Event()

    def handler(session: Session, message: ReceivedMessage) -> None:
        session.execute(text("INSERT INTO processed (tx_id, body) VALUES (:k, :b)"),
                        {"k": message.dedupe_key, "b": message.text})
        deliveries.append(message.reconsume_times)
        if len(deliveries) == 1:
            raise RuntimeError("first delivery fails")
        done.set()

    inbox = InboxConsumer("Flaky", "flaky-group", handler, engine=engine,
                          server=broker.native, rebalance_interval=0.5)
    with inbox:
        assert done.wait(20)
        wait_until(lambda: inbox.processed == 1, timeout=10)
    assert deliveries == [0, 1] and inbox.failed == 1 and inbox.duplicates == 0
    assert _count(engine, "processed") == 1
    with engine.connect() as conn:
        assert conn.execute(select(inbox_table.c.tx_id)).scalars().all() == [tx_id]


def _message(key: str) -> ReceivedMessage:
    return ReceivedMessage(topic="T", body=b"{}", tags=None, keys=(), properties={},
                           msg_id=key, queue_id=0, queue_offset=0, commit_log_offset=0,
                           reconsume_times=0, born_timestamp=0, store_timestamp=0,
                           delivered_topic="T", transaction_id=key)


@pytest.mark.timeout(30)
def test_handle_skips_duplicates_per_group_on_sqlite(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'inbox.sqlite'}")
    metadata.create_all(engine)
    seen: list[str] = []
    outbox = Outbox(engine=engine)

    @consumer("T", "g1", outbox=outbox)
    def first(session: Session, message: ReceivedMessage) -> None:
        seen.append(f"g1:{message.dedupe_key}")

    second = InboxConsumer("T", "g2", lambda s, m: seen.append(f"g2:{m.dedupe_key}"),
                           engine=engine, server="127.0.0.1:1")
    assert isinstance(first, InboxConsumer) and first.server == outbox.broker
    for inbox in (first, second, first, second):
        assert inbox.handle(_message("A")) is ConsumeResult.SUCCESS
    assert first.handle(_message("B")) is ConsumeResult.SUCCESS
    assert seen == ["g1:A", "g2:A", "g1:B"]
    assert (first.processed, first.duplicates, second.duplicates) == (2, 1, 1)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(inbox_table)).scalar() == 3
    with pytest.raises(ConfigurationError):
        InboxConsumer("T", "g", lambda s, m: None)
    engine.dispose()
