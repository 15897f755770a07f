"""One set of real servers for every console test (the module fixture in conftest.py).

PostgreSQL (the outbox and inbox tables), Redis (Celery's broker), broker_lite
(check-backs after 1 s, retries 100x faster, no topic auto-create), a real
``rocketbox relay`` subprocess (Celery worker, its sweeper thread and the check-back
responder), an inbox consumer group ``billing`` and a group ``shipping`` that
dead-letters messages tagged ``fragile``, and the console on a free port.
Traffic, made before the tests run and waited for:

* orders relayed by the relay and consumed by both groups;
* a ``fragile`` order: ``shipping`` fails it twice, so it is dead-lettered;
* a row for topic ``Refunds`` (not created yet) that a relay with one attempt
  parks;
* a unit of work whose half is left open: the broker checks it back, the
  relay's responder answers COMMIT from the table, ``billing`` consumes it;
* a half whose producer went away (pending), and one whose producer never
  decides (discarded to ``TRANS_CHECK_MAX_TIME_TOPIC`` after 3 checks).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from broker_lite.client import (
    Admin,
    ConsumeResult,
    LocalTransactionState,
    Message,
    PushConsumer,
    ReceivedMessage,
    TransactionProducer,
)
from outbox import BrokerLitePublisher, Outbox, Relay, publish
from outbox.config import RelaySettings
from outbox.console import ConsoleConfig, ConsoleThread
from outbox.half_first import SqlStatusListener
from outbox.inbox import InboxConsumer
from outbox.models import inbox_table
from outbox.models import transaction_table as t
from outbox.publish import new_tx_id
from procgroup import Process
from tests.support import BrokerLiteServer, PostgresServer, start_broker_lite, wait_until
from tests.support.outbox_db import pg_outbox_database

BROKER_ARGS = ("--tx-timeout", "1", "--tx-check-interval", "0.3", "--tx-check-max", "3",
               "--delay-time-scale", "0.01", "--no-auto-create-topics")


class _Undecided:
    """A local transaction that never decides (UNKNOW, then UNKNOW to every check-back)."""

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW


@dataclass
class Stack:
    engine: Engine
    db_url: str
    broker: BrokerLiteServer
    admin: Admin
    outbox: Outbox
    console: ConsoleThread
    relay_log: Path
    orders: list[str] = field(default_factory=list)
    fragile: str = ""
    parked: str = ""
    checked: str = ""
    #: a half whose producer group went away (pending for good), and one discarded
    orphan: str = ""
    discarded: str = ""
    #: tx_ids the ``shipping`` group accepts even when fragile (the resend test adds one)
    accepted: set[str] = field(default_factory=set)
    #: (tx_id, reconsume_times, result) of each ``shipping`` delivery
    shipped: list[tuple[str, int, str]] = field(default_factory=list)

    def url(self, path: str = "/") -> str:
        return self.console.url + path

    def console_series(self) -> dict[str, list[float | None]]:
        """The overview's sampled series, as the charts fetch them."""
        with urllib.request.urlopen(self.url("/api/series"), timeout=10) as response:
            data: dict[str, list[float | None]] = json.load(response)
        return data

    def commits_of(self, tx_id: str, topic: str) -> int:
        """Commit records of ``tx_id`` on ``topic`` (the key index holds every record)."""
        return sum(1 for msg in self.admin.query_by_key(tx_id, 256)
                   if msg.delivered_topic == topic)

    def inbox_groups(self, tx_id: str) -> list[str]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(inbox_table.c.consumer_group)
                                     .where(inbox_table.c.tx_id == tx_id)).scalars())

    def publish_orders(self, count: int) -> list[str]:
        ids = []
        for n in range(count):
            with Session(self.engine) as session, session.begin():
                ids.append(publish(session, "Orders", {"order": f"more-{n}"},
                                   outbox=self.outbox, tag="plain"))
        return ids

    def row(self, tx_id: str) -> dict[str, object]:
        with self.engine.connect() as conn:
            return dict(conn.execute(select(t).where(t.c.tx_id == tx_id)).one()._mapping)


@contextlib.contextmanager
def _relay_process(db_url: str, broker: str, celery: str, log: Path) -> Iterator[None]:
    argv = [sys.executable, "-m", "outbox", "relay", "--db", db_url, "--broker", broker,
            "--celery-broker", celery, "--log-level", "INFO"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETBOX_")}
    log.unlink(missing_ok=True)
    proc = Process(argv, log=log, env=env, name="relay").start()
    try:
        yield
    finally:
        proc.stop(timeout=20)


def _write_audit(folder: Path, divergent_tx: str) -> tuple[Path, Path]:
    """An audit report in the shapes `rocketbox audit --json/--out` write (see docs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    counts = {"ok": 7, "lost": 1, "phantom": 0, "duplicate": 0, "stuck_half": 0,
              "discarded": 0, "rolled_back_but_delivered": 0, "pending": 0}
    report = folder / "audit.json"
    report.write_text(json.dumps({"counts": counts, "divergent": 1, "segments": 1,
                                  "corrupt": [], "latency_ms": {"p50": 12.0, "p99": 40.0,
                                                                "histogram": []},
                                  "top_topics": [{"topic": "Refunds", "divergent": 1}],
                                  "timeline": {"bucket_ms": 0, "points": []}}))
    out = folder / "divergent"
    out.mkdir()
    pq.write_table(pa.table({"tx_id": [divergent_tx], "reason": ["lost"],
                             "detail": ["committed in the database, not in the broker"],
                             "topic": ["Refunds"]}), out / "part-0.parquet")
    return report, out


@contextlib.contextmanager
def running_stack(postgres_server: PostgresServer, redis_url: str, tmp: Path) -> Iterator[Stack]:
    celery = redis_url.rsplit("/", 1)[0] + "/9"
    with contextlib.ExitStack() as stack:
        engine, url = stack.enter_context(pg_outbox_database(postgres_server, "rbc"))
        broker = stack.enter_context(start_broker_lite(tmp / "broker", BROKER_ARGS))
        admin = Admin(broker.native)
        admin.start()
        stack.callback(admin.shutdown)
        admin.create_topic("Orders", 2)
        outbox = Outbox(engine=engine, broker=broker.native)
        relay_log = tmp / "relay.log"
        stack.enter_context(_relay_process(url, broker.native, celery, relay_log))

        state = Stack(engine, url, broker, admin, outbox, None, relay_log)  # type: ignore[arg-type]
        lock = threading.Lock()

        def billing(session: Session, message: ReceivedMessage) -> None:
            """Processing is the inbox row itself."""

        def shipping(message: ReceivedMessage) -> ConsumeResult:
            tx_id = message.msg_id
            fail = message.tags == "fragile" and tx_id not in state.accepted
            with lock:
                state.shipped.append((tx_id, message.reconsume_times,
                                      "failed" if fail else "ok"))
            return ConsumeResult.RECONSUME_LATER if fail else ConsumeResult.SUCCESS

        inbox = InboxConsumer("Orders", "billing", billing, outbox=outbox, consume_threads=2)
        inbox.start()
        stack.callback(inbox.shutdown)
        shipper = PushConsumer("shipping", broker.native, listener=shipping,
                               max_reconsume_times=1, consume_threads=2)
        shipper.subscribe("Orders")
        shipper.start()
        stack.callback(shipper.shutdown)

        # orders, one of them fragile
        for n in range(5):
            with Session(engine) as session, session.begin():
                state.orders.append(publish(session, "Orders", {"order": n, "total": 10 * n},
                                            outbox=outbox, keys=[f"order-{n}"],
                                            tag="fragile" if n == 4 else "plain"))
        state.fragile = state.orders[-1]

        # a row the relay parks: its topic does not exist (auto-create is off)
        with engine.begin() as conn:
            state.parked = publish(conn, "Refunds", {"refund": 1}, outbox=outbox)
        one_try = Outbox(engine=engine, broker=broker.native,
                         relay=RelaySettings(max_attempts=1))
        publisher = BrokerLitePublisher(one_try)
        try:
            Relay(one_try, publisher).run_once(only=[state.parked])
        finally:
            publisher.close()
        assert state.row(state.parked)["parked"], state.row(state.parked)

        # a half left open: the broker's check-back decides it, the relay's responder answers
        state.checked = new_tx_id()
        producer = TransactionProducer("rocketbox", SqlStatusListener(outbox), broker.native)
        producer.start()
        try:
            producer.send_half(Message("Orders", b'{"order": "checked"}', tags="plain",
                                       msg_id=state.checked))
        finally:
            producer.shutdown()
        with engine.begin() as conn:
            publish(conn, "Orders", {"order": "checked"}, outbox=outbox, tag="plain",
                    tx_id=state.checked, state="COMMIT")
            conn.execute(update(t).where(t.c.tx_id == state.checked).values(
                next_attempt_at=datetime.now(UTC) + timedelta(seconds=30)))

        # a half left open by a producer that went away: nobody to check, pending for good
        with TransactionProducer("orphans", _Undecided(), broker.native) as orphans:
            state.orphan = orphans.send_message_in_transaction(
                Message("Orders", b'{"order": "orphan"}'), None).transaction_id
        # one whose producer stays but never decides: discarded after 3 checks
        with TransactionProducer("undecided", _Undecided(), broker.native) as undecided:
            state.discarded = undecided.send_message_in_transaction(
                Message("Orders", b'{"order": "undecided"}'), None).transaction_id
            wait_until(lambda: state.commits_of(state.discarded,
                                                "TRANS_CHECK_MAX_TIME_TOPIC") == 1, timeout=30)

        def log_tail() -> str:
            return relay_log.read_text(errors="replace")[-3000:]

        wait_until(lambda: all(state.row(tx)["relayed_at"] for tx in state.orders),
                   timeout=90, message=log_tail)
        wait_until(lambda: state.commits_of(state.checked, "Orders") == 1, timeout=60,
                   message=log_tail)
        wait_until(lambda: all("billing" in state.inbox_groups(tx)
                               for tx in [*state.orders, state.checked]), timeout=60,
                   message=lambda: f"inbox: processed {inbox.processed}")
        wait_until(lambda: state.commits_of(state.fragile, "%DLQ%shipping") == 1, timeout=60,
                   message=lambda: f"shipping deliveries: {state.shipped}")

        audit_json, audit_out = _write_audit(tmp, state.parked)
        state.console = ConsoleThread(ConsoleConfig(
            broker=broker.native, db_url=url, port=0, sample_seconds=0.5,
            audit_json=audit_json, audit_out=audit_out)).start()
        stack.callback(state.console.stop)
        yield state
