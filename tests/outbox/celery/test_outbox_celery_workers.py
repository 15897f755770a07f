"""Real Celery workers (subprocesses, threads pool) on Redis, with PostgreSQL and broker_lite."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, publish
from outbox.celery import CelerySettings
from outbox.models import transaction_table as t
from outbox.targets import OutgoingMessage
from tests.outbox.celery.rocketbox_celery_support import (
    CeleryStack,
    broker_records,
    celery_worker,
    commit,
    commit_counts,
    fixed_port_broker,
    hooked_outbox,
    module_entry,
    relayed_ids,
    wait_relayed,
)
from tests.support import BrokerLiteServer, free_port, start_broker_lite, wait_until


def app_outbox(engine: Engine, broker: str, celery_broker: str) -> Outbox:
    """The web side: an outbox whose on_commit enqueues rocketbox.relay (no sweeper)."""
    return hooked_outbox(engine, broker, celery_broker,
                         settings=CelerySettings(sweep_interval=0, listen=False))


@pytest.mark.timeout(90)
def test_worker_relays_committed_units_once_and_nothing_else(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    outbox = app_outbox(engine, broker.native, stack.redis.url)
    with celery_worker("relay", stack.env(broker.native, RB_TEST_SWEEP="0"), stack.tmp,
                       sweeper=False) as worker:
        started = time.monotonic()
        with Session(engine) as session, session.begin():
            a = publish(session, "Jobs", {"a": 1}, outbox=outbox)
            with session.begin_nested() as sp:
                dropped = publish(session, "Jobs", {"x": 1}, outbox=outbox)
                sp.rollback()
            b = publish(session, "Jobs", {"b": 1}, outbox=outbox)
        with Session(engine) as session, session.begin() as tx:
            never = publish(session, "Jobs", {"c": 1}, outbox=outbox)
            tx.rollback()
        wait_relayed(engine, {a, b}, worker, timeout=20)
        latency = time.monotonic() - started
    counts = commit_counts(broker_records(broker.data_dir))
    assert counts == {a: 1, b: 1}, counts
    assert dropped not in counts and never not in counts
    assert latency < 5, latency


@pytest.mark.timeout(90)
def test_redis_down_at_commit_the_sweeper_relays_later(
        stack: CeleryStack, broker: BrokerLiteServer, caplog: pytest.LogCaptureFixture) -> None:
    engine = stack.engine
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    outbox = app_outbox(engine, broker.native, dead_redis)
    with celery_worker("sweeper", stack.env(broker.native, RB_TEST_SWEEP="0.5"), stack.tmp,
                       concurrency=1) as worker:
        started = time.monotonic()
        ids = commit(engine, outbox, 3, "Swept")
        commit_time = time.monotonic() - started
        assert "the sweeper will relay them" in caplog.text
        # no task could be enqueued (nothing listens at that Redis): the worker's sweeper
        # relays them, possibly before this line runs on a slow commit (no "not yet" here)
        wait_relayed(engine, set(ids), worker, timeout=20)
    assert commit_time < 3, commit_time
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in ids}


@pytest.mark.timeout(120)
def test_two_workers_racing_never_commit_twice(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    env = stack.env(broker.native, RB_TEST_SWEEP="0.2")
    outbox = app_outbox(engine, broker.native, stack.redis.url)
    groups: dict[str, list[str]] = {"g1": [], "g2": []}
    with celery_worker("racer1", env, stack.tmp) as one, \
            celery_worker("racer2", env, stack.tmp) as two:
        for i in range(40):
            with Session(engine) as session, session.begin():
                for g, ids in groups.items():
                    ids.append(publish(session, "Race", {"i": i}, outbox=outbox,
                                       message_group=g))
                publish(session, "Race", {"i": i}, outbox=outbox)
        expected = _all_ids(engine)
        wait_relayed(engine, expected, one, two, timeout=40)
    # Which worker relayed how much is the scheduler's business (on a busy machine
    # one may take every row); the invariant is that racing never commits twice
    # and keeps each group's order.
    records = broker_records(broker.data_dir)
    counts = commit_counts(records)
    assert set(counts) == expected and set(counts.values()) == {1}
    for ids in groups.values():
        order = [r["transaction_id"] for r in records
                 if r["sysflag"] == "commit" and r["transaction_id"] in set(ids)]
        assert order == ids


def _all_ids(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id)).scalars())


@pytest.mark.timeout(120)
def test_worker_killed_between_half_and_end_the_checker_commits_once(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    marker = stack.tmp / "killed"
    env = stack.env(broker.native, RB_TEST_SWEEP="0", RB_TEST_LEASE="2")
    outbox = app_outbox(engine, broker.native, stack.redis.url)
    with module_entry("checker", "checker", env, stack.tmp) as checker:
        with celery_worker("doomed", {**env, "RB_TEST_KILL_AFTER_HALVES": str(marker)},
                           stack.tmp, sweeper=False) as doomed:
            with Session(engine) as session, session.begin():
                tx_id = publish(session, "Killed", {"k": 1}, outbox=outbox)
            wait_until(lambda: not doomed.alive(), timeout=20,
                       message=doomed.log_tail)
        assert doomed.returncode == -9
        assert marker.read_text() == tx_id
        # the half is in the broker, no end was sent; the row is still unrelayed
        assert relayed_ids(engine) == set()

        def committed() -> bool:
            return commit_counts(broker_records(broker.data_dir)).get(tx_id, 0) > 0
        wait_until(committed, timeout=20, message=checker.log_tail)
        assert f"check-back {tx_id}" in checker.log_text()
        assert "COMMIT (status row)" in checker.log_text()
        # a fresh worker re-relays the row once its lease ran out: still one commit
        with celery_worker("after", {**env, "RB_TEST_SWEEP": "0.3"}, stack.tmp) as after:
            wait_relayed(engine, {tx_id}, after, timeout=20)
    records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx_id: 1}
    checks = [r for r in records if r["transaction_id"] == tx_id
              and r["properties"].get("TX_STATE") == "CHECK"]
    assert checks, "the commit came from a check-back"


@pytest.mark.timeout(120)
def test_broker_lite_down_for_a_while_rows_wait_then_flow(stack: CeleryStack) -> None:
    engine = stack.engine
    data_dir, args, address = fixed_port_broker(stack.tmp)
    outbox = app_outbox(engine, address, stack.redis.url)
    ids: list[str] = []
    with celery_worker("outage", stack.env(address, RB_TEST_SWEEP="0.3"), stack.tmp) as worker:
        with start_broker_lite(data_dir, args):
            ids += commit(engine, outbox, 5, "Outage", message_group="g")
            wait_relayed(engine, set(ids), worker, timeout=20)
        # the broker is down: tasks fail, retry, sweeps fail
        ids += commit(engine, outbox, 10, "Outage", message_group="g")
        wait_until(lambda: worker.log_text().count("unreachable") >= 2, timeout=20,
                   message=worker.log_tail)
        with engine.connect() as conn:
            waiting = conn.execute(select(t.c.attempts, t.c.parked)
                                   .where(t.c.relayed_at.is_(None))).all()
        assert len(waiting) == 10 and not any(r.parked for r in waiting)
        with start_broker_lite(data_dir, args):
            wait_relayed(engine, set(ids), worker, timeout=30)
    records = broker_records(data_dir)
    assert commit_counts(records) == {tx: 1 for tx in ids}
    order = [r["transaction_id"] for r in records if r["sysflag"] == "commit"]
    assert order == ids


@pytest.mark.timeout(90)
def test_checker_bootstep_answers_check_backs_inside_the_worker(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    env = stack.env(broker.native, RB_TEST_SWEEP="0", RB_TEST_CHECKER="1")
    plain = Outbox(engine=engine, broker=broker.native)  # no hook: no relay task
    with Session(engine) as session, session.begin():
        tx_id = publish(session, "Orphan", {"o": 1}, outbox=plain)
    publisher = BrokerLitePublisher(plain)
    try:  # an orphan half: sent, never ended (as if the relay died)
        [half] = publisher.send_halves([OutgoingMessage(tx_id, "Orphan", b'{"o":1}', None, (),
                                                        None, {})])
        assert not isinstance(half, Exception)
    finally:
        publisher.close()
    with celery_worker("checking", env, stack.tmp, sweeper=False) as worker:
        wait_until(lambda: commit_counts(broker_records(broker.data_dir)).get(tx_id),
                   timeout=20, message=worker.log_tail)
        assert f"check-back {tx_id}" in worker.log_text()
    assert commit_counts(broker_records(broker.data_dir)) == {tx_id: 1}
