"""The RabbitMQ target against a real node (issue 32's "done when", RabbitMQ half).

Real parts only: PostgreSQL for the outbox and the consumer's business table,
a rabbitmq-server node (tests/support/rabbitmq_server.py), aio-pika on both
sides, the relay in a child process where it is killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import Outbox, Relay, publish
from outbox.errors import RelayError
from outbox.models import transaction_table as t
from outbox.targets.choose import publisher_for
from tests.support import wait_until
from tests.support.publishers import drain
from tests.support.rabbitmq_server import RabbitMQServer
from tests.targets.rabbitmq.rabbit_support import (
    Consumer,
    declare,
    on_order,
    processed,
    queue_depth,
    relayed_ids,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def _commit(engine: Engine, outbox: Outbox, topic: str, n: int = 1, **kwargs: object) -> list[str]:
    with Session(engine) as session, session.begin():
        return [publish(session, topic, {"i": i}, outbox=outbox, **kwargs)  # type: ignore[arg-type]
                for i in range(n)]


@pytest.mark.timeout(180)
def test_a_commit_gives_exactly_one_message_after_the_inbox_and_a_rollback_none(
        outbox: Outbox, pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    [committed] = _commit(pg_engine, outbox, queue, tag="created", keys=["order-1"],
                          headers={"origin": "shop"})
    with Session(pg_engine) as session:
        session.begin()
        rolled_back = publish(session, queue, {"i": 2}, outbox=outbox)
        session.rollback()

    report = drain(outbox, publisher_for(outbox))
    assert (report.relayed, report.failed) == (1, 0)
    assert relayed_ids(pg_engine) == {committed}

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: c.inbox.counts["processed"] >= 1, timeout=60)
    assert consumer.deliveries == [committed] and rolled_back not in consumer.deliveries
    assert processed(pg_engine) == [committed]
    assert consumer.inbox.counts == {"processed": 1, "duplicates": 0, "failed": 0}
    assert queue_depth(rabbitmq_server.url, queue) == 0  # acked, and nothing else came
    [message] = consumer.messages
    assert message["delivery_mode"] == 2 and message["type"] == "created"
    assert message["headers"]["rocketbox-keys"] == "order-1"
    assert message["headers"]["origin"] == "shop"


@pytest.mark.timeout(240)
def test_a_relay_killed_between_the_confirm_and_the_mark_re_sends_and_the_inbox_processes_once(
        outbox: Outbox, pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer,
        tmp_path: Path) -> None:
    [tx_id] = _commit(pg_engine, outbox, queue)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.run(
        [sys.executable, str(HERE / "relay_child.py"),
         pg_engine.url.render_as_string(hide_password=False), rabbitmq_server.url, "2"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert child.returncode == -9, child.stderr[-3000:]
    assert relayed_ids(pg_engine) == set()  # killed before the mark
    assert queue_depth(rabbitmq_server.url, queue) == 1  # but confirmed: the broker has it

    # the next relay, once the dead one's claim (2 s) ran out, sends it again
    wait_until(lambda: drain(outbox, publisher_for(outbox)).relayed, timeout=60,
               message="the row was never relayed again")
    assert relayed_ids(pg_engine) == {tx_id}

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: len(c.deliveries) >= 2, timeout=60)
    assert consumer.deliveries == [tx_id, tx_id]
    assert consumer.inbox.counts == {"processed": 1, "duplicates": 1, "failed": 0}
    assert processed(pg_engine) == [tx_id]


@pytest.mark.timeout(400)
def test_the_node_restarted_mid_stream_loses_nothing(
        pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    from outbox.config import RelaySettings

    outbox = Outbox(engine=pg_engine, broker=rabbitmq_server.url,
                    relay=RelaySettings(batch_size=20, backoff_base=0.05, backoff_max=0.5,
                                        max_attempts=1000, broker_timeout=5.0))
    stop_producing, stop_relaying = threading.Event(), threading.Event()
    committed: list[str] = []
    failures: list[str] = []

    def produce() -> None:
        while not stop_producing.is_set():
            committed.extend(_commit(pg_engine, outbox, queue, 2))
            stop_producing.wait(0.01)

    def relay() -> None:
        publisher = publisher_for(outbox)
        try:
            while not stop_relaying.is_set():
                try:
                    report = Relay(outbox, publisher).run_once()
                    failures.extend(report.errors)
                except RelayError as exc:
                    failures.append(str(exc))
                stop_relaying.wait(0.01)
        finally:
            publisher.close()

    threads = [threading.Thread(target=produce, daemon=True),
               threading.Thread(target=relay, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(relayed_ids(pg_engine)) >= 40, timeout=90,
                   message="the relay did not get going")
        # stopped mid-stream (SIGTERM: a SIGKILL within minutes of declaring a quorum
        # queue loses the queue itself on RabbitMQ 3.10; docs/rabbitmq.md, "Restarts")
        rabbitmq_server.stop()
        wait_until(lambda: failures, timeout=60, message="the relay never saw the node gone")
        before = len(relayed_ids(pg_engine))
        rabbitmq_server.start()
        wait_until(lambda: len(relayed_ids(pg_engine)) >= before + 40, timeout=120,
                   message="the relay did not resume after the restart")
    finally:
        stop_producing.set()
        threads[0].join(30)
    try:
        ids = set(committed)
        wait_until(lambda: relayed_ids(pg_engine) == ids, timeout=120,
                   message=lambda: f"{len(ids - relayed_ids(pg_engine))} rows not relayed")
    finally:
        stop_relaying.set()
        threads[1].join(60)

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: set(processed(pg_engine)) >= ids, timeout=120)
    assert sorted(processed(pg_engine)) == sorted(ids)  # each exactly once
    assert set(consumer.deliveries) == ids  # nothing lost, nothing from elsewhere


@pytest.mark.timeout(180)
def test_a_row_not_confirmed_holds_back_the_rest_of_its_message_group_only(
        outbox: Outbox, pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    missing = queue + "-missing"  # no queue has this name: the broker returns it (NO_ROUTE)
    [head] = _commit(pg_engine, outbox, missing, message_group="g1")
    [behind] = _commit(pg_engine, outbox, queue, message_group="g1")
    [other] = _commit(pg_engine, outbox, queue, message_group="g2")
    [loose] = _commit(pg_engine, outbox, queue)

    publisher = publisher_for(outbox)
    try:
        report = Relay(outbox, publisher).run_once()
    finally:
        publisher.close()
    assert relayed_ids(pg_engine) == {other, loose}
    with pg_engine.connect() as conn:
        errors = {r.tx_id: r.last_error for r in conn.execute(
            select(t.c.tx_id, t.c.last_error).where(t.c.relayed_at.is_(None)))}
    assert "no queue takes routing key" in errors[head] and "NO_ROUTE" in errors[head]
    assert "held back" in errors[behind] and head in errors[behind]
    assert report.relayed == 2

    consumer = Consumer(rabbitmq_server.url, queue, outbox)
    consumer.run_until(lambda c: len(c.deliveries) >= 2, timeout=60)
    assert sorted(consumer.deliveries) == sorted([other, loose])  # g1's second row never went

    declare(rabbitmq_server.url, missing)  # the operator fixes the setup: g1 goes, in order
    with pg_engine.begin() as conn:
        conn.execute(t.update().values(next_attempt_at=t.c.created_at))
    drain(outbox, publisher_for(outbox))
    assert relayed_ids(pg_engine) == {head, behind, other, loose}


@pytest.mark.timeout(180)
def test_a_handler_that_fails_is_rolled_back_and_its_message_comes_back_until_it_commits(
        outbox: Outbox, pg_engine: Engine, queue: str, rabbitmq_server: RabbitMQServer) -> None:
    [tx_id] = _commit(pg_engine, outbox, queue)
    drain(outbox, publisher_for(outbox))
    calls: list[str] = []

    def fails_once(session: Session, message: Any) -> None:
        calls.append(message.message_id)
        on_order(session, message)  # written, then thrown away with the failed transaction
        if len(calls) == 1:
            raise RuntimeError("the business transaction fails")

    consumer = Consumer(rabbitmq_server.url, queue, outbox, handler=fails_once)
    consumer.run_until(lambda c: c.inbox.counts["processed"] >= 1, timeout=60)
    assert consumer.deliveries == [tx_id, tx_id]  # not acked the first time: it came back
    assert consumer.inbox.counts == {"processed": 1, "duplicates": 0, "failed": 1}
    assert processed(pg_engine) == [tx_id]
    assert queue_depth(rabbitmq_server.url, queue) == 0
