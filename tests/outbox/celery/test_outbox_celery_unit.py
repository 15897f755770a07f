"""Fast tests of the Celery glue: app factory, settings, the on_commit hook, eager tasks."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from outbox import (
    BrokerLitePublisher,
    ConfigurationError,
    Outbox,
    RelayError,
    RelaySettings,
    TransactionRow,
    publish,
)
from outbox.celery import (
    END_TRANSACTION_TASK,
    RELAY_TASK,
    SWEEP_TASK,
    CelerySettings,
    celery_on_commit,
    make_celery,
    rocketbox_state,
)
from outbox.celery.hooks import CoalescingHook
from outbox.celery.sweeper import release_dead_claims
from outbox.celery.worker import worker_argv
from outbox.models import transaction_table as tx_table
from outbox.targets import OutgoingMessage
from tests.outbox.celery.rocketbox_celery_support import broker_records, commit_counts, relayed_ids
from tests.support import BrokerLiteServer, free_port, wait_until
from tests.support.sqlite import sqlite_outbox_engine


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Iterator[Engine]:
    """SQLite with real BEGIN/SAVEPOINT and the outbox tables."""
    engine = sqlite_outbox_engine(tmp_path / "unit.sqlite")
    yield engine
    engine.dispose()


@pytest.mark.timeout(30)
def test_make_celery_names_tasks_acks_late_and_adds_the_sweeper_lane(
        sqlite_engine: Engine, tmp_path: Path) -> None:
    outbox = Outbox(engine=sqlite_engine)
    app = make_celery(outbox, broker_url=f"sqla+sqlite:///{tmp_path / 'q.sqlite'}",
                      settings=CelerySettings(sweep_interval=2.5, polling_interval=0.05),
                      worker_concurrency=3)
    for name in (RELAY_TASK, SWEEP_TASK, END_TRANSACTION_TASK):
        task = app.tasks[name]
        assert task.acks_late and task.reject_on_worker_lost
    steps = {s.__name__ for s in app.steps["worker"]}
    assert {"SweeperStep", "SuperviseStep"} <= steps
    assert not app.conf.beat_schedule  # the sweeper is a lane of the worker, not beat's
    assert app.conf.task_default_queue == "rocketbox"
    # the engine is made from the URL as given (kombu gets it without the driver part)
    assert app.conf.broker_transport_options == {
        "polling_interval": 0.05, "rocketbox_db_url": f"sqlite:///{tmp_path / 'q.sqlite'}"}
    assert app.conf.worker_concurrency == 3  # **conf passes through
    assert rocketbox_state(app).outbox is outbox
    assert "CheckbackStep" not in {s.__name__ for s in app.steps["worker"]}
    checking = make_celery(outbox, broker_url="memory://",
                           settings=CelerySettings(checker=True, sweep_interval=0))
    assert "CheckbackStep" in {s.__name__ for s in checking.steps["worker"]}
    assert "SweeperStep" not in {s.__name__ for s in checking.steps["worker"]}
    assert "--beat" not in worker_argv(concurrency=2, loglevel="info")


@pytest.mark.timeout(30)
def test_settings_and_foreign_apps_are_refused(sqlite_engine: Engine) -> None:
    from celery import Celery
    with pytest.raises(ConfigurationError):
        CelerySettings(sweep_interval=-1)
    with pytest.raises(ConfigurationError):
        CelerySettings(polling_interval=0)
    with pytest.raises(ConfigurationError):
        rocketbox_state(Celery("other", set_as_current=False))
    with pytest.raises(ConfigurationError):
        worker_argv(concurrency=0, loglevel="info")


@pytest.mark.timeout(30)
def test_hook_with_a_dead_redis_neither_raises_nor_holds_up_the_commit(
        sqlite_engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox(engine=sqlite_engine)
    app = make_celery(outbox, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    outbox = dataclasses.replace(outbox, on_commit=celery_on_commit(app))
    started = time.monotonic()
    with Session(sqlite_engine) as session, session.begin():
        tx_id = publish(session, "T", {"a": 1}, outbox=outbox)
    assert time.monotonic() - started < 2
    assert "the sweeper will relay them" in caplog.text
    with Session(sqlite_engine) as session:
        assert session.get_one(TransactionRow, tx_id).state == "COMMIT"


@pytest.mark.timeout(30)
def test_dead_redis_warns_once_per_task_and_splits_ids_by_batch_size(
        sqlite_engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox(engine=sqlite_engine, relay=RelaySettings(batch_size=200))
    app = make_celery(outbox, broker_url=f"redis://127.0.0.1:{free_port()}/0")
    hook = celery_on_commit(app, window=0)
    hook([f"id-{i}" for i in range(450)])
    counts = [r.getMessage() for r in caplog.records if "the sweeper will relay" in r.getMessage()]
    assert [c.split(" for ")[1].split(" message")[0] for c in counts] == ["200", "200", "50"]


@pytest.mark.timeout(30)
def test_coalescing_hook_sends_at_once_when_idle_and_batches_within_the_window() -> None:
    sent: list[tuple[float, list[str]]] = []
    window = 0.2
    hook = CoalescingHook(lambda ids: sent.append((time.monotonic(), ids)), window)
    hook(["a"])
    assert [ids for _t, ids in sent] == [["a"]]  # idle: at once, in the caller's thread
    first_at = sent[0][0]
    hook(["b"])
    hook(["c", "d"])
    hook([])
    assert len(sent) == 1  # inside the window: collected
    wait_until(lambda: len(sent) == 2, timeout=5, message="the window's batch")
    at, batch = sent[1]
    assert batch == ["b", "c", "d"]
    assert at - first_at >= window * 0.9
    # the next window: one more commit rides on a scheduled send, never a second task
    hook(["e"])
    wait_until(lambda: len(sent) == 3, timeout=5, message="the next batch")
    assert sent[2][1] == ["e"] and sent[2][0] - at >= window * 0.9
    hook(["f"])
    hook.flush()
    assert sent[-1][1] == ["f"]
    hook.flush()  # nothing left: nothing sent
    assert len(sent) == 4


@pytest.mark.timeout(30)
def test_coalescing_hook_from_many_threads_loses_no_id() -> None:
    import threading

    sent: list[list[str]] = []
    lock = threading.Lock()

    def send(ids: list[str]) -> None:
        with lock:
            sent.append(ids)

    hook = CoalescingHook(send, 0.01)

    def commit(n: int) -> None:
        for i in range(200):
            hook([f"{n}-{i}"])

    threads = [threading.Thread(target=commit, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_until(lambda: sum(len(b) for b in sent) == 800, timeout=5, message="every id sent")
    flat = [i for batch in sent for i in batch]
    assert sorted(flat) == sorted(f"{n}-{i}" for n in range(4) for i in range(200))
    assert len(sent) < 800  # coalesced


@pytest.mark.timeout(30)
def test_on_commit_sees_the_outer_ids_after_a_savepoint_rollback(sqlite_engine: Engine) -> None:
    calls: list[list[str]] = []

    def hook(ids: Sequence[str]) -> None:
        calls.append(list(ids))

    outbox = Outbox(engine=sqlite_engine, on_commit=hook)
    with Session(sqlite_engine) as session:
        with session.begin():
            a = publish(session, "T", 1, outbox=outbox)
            with session.begin_nested() as savepoint:
                inner = publish(session, "T", 2, outbox=outbox)
                savepoint.rollback()
            b = publish(session, "T", 3, outbox=outbox)
        with session.begin() as tx:
            publish(session, "T", 4, outbox=outbox)
            tx.rollback()
        with session.begin():
            c = publish(session, "T", 5, outbox=outbox)
    assert calls == [[a, inner, b], [c]]


@pytest.mark.timeout(60)
def test_eager_tasks_relay_sweep_and_end_transactions(
        sqlite_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=sqlite_engine, broker=broker.native,
                    relay=RelaySettings(broker_timeout=1.0))
    app = make_celery(outbox, broker_url="memory://", task_always_eager=True,
                      settings=CelerySettings(retry_base=0.01, retry_max=0.02, max_retries=1))
    with Session(sqlite_engine) as session, session.begin():
        first = publish(session, "Eager", {"n": 1}, outbox=outbox)
        second = publish(session, "Eager", {"n": 2}, outbox=outbox)
    # ungrouped: the given row only
    assert app.tasks[RELAY_TASK].apply(args=[[first]]).get()["relayed"] == 1
    assert relayed_ids(sqlite_engine) == {first}
    with Session(sqlite_engine) as session, session.begin():
        head = publish(session, "Eager", {"g": 1}, outbox=outbox, message_group="g")
        nxt = publish(session, "Eager", {"g": 2}, outbox=outbox, message_group="g")
    # a grouped row, then (a second pass) whatever else is due: the group's next row
    # and the ungrouped row left over
    assert app.tasks[RELAY_TASK].apply(args=[[head]]).get()["relayed"] == 3
    assert relayed_ids(sqlite_engine) == {first, second, head, nxt}
    plain = Outbox(engine=sqlite_engine, broker=broker.native)
    with Session(sqlite_engine) as session, session.begin():
        swept = publish(session, "Eager", {"n": 2.5}, outbox=plain)
    assert app.tasks[SWEEP_TASK].apply().get()["relayed"] == 1

    with Session(sqlite_engine) as session, session.begin():
        third = publish(session, "Eager", {"n": 3}, outbox=plain)
    publisher = BrokerLitePublisher(plain)
    try:
        [half] = publisher.send_halves([OutgoingMessage(third, "Eager", b"3", None, (), None,
                                                        {})])
    finally:
        publisher.close()
    assert not isinstance(half, Exception)
    ended = app.tasks[END_TRANSACTION_TASK].apply(
        args=[third, "COMMIT", half.half_offset, half.queue_offset]).get()
    assert ended["ended"] is True
    assert relayed_ids(sqlite_engine) == {first, second, head, nxt, swept, third}
    again = app.tasks[END_TRANSACTION_TASK].apply(
        args=[third, "ROLLBACK", half.half_offset, half.queue_offset]).get()
    assert again["ended"] is False and "commit" in again["error"].lower()
    rocketbox_state(app).close()
    assert commit_counts(broker_records(broker.data_dir)) == {
        first: 1, second: 1, head: 1, nxt: 1, swept: 1, third: 1}


@pytest.mark.timeout(60)
def test_eager_relay_retries_while_the_broker_is_unreachable(sqlite_engine: Engine) -> None:
    outbox = Outbox(engine=sqlite_engine, broker=f"127.0.0.1:{free_port()}",
                    relay=RelaySettings(broker_timeout=0.3))
    app = make_celery(outbox, broker_url="memory://", task_always_eager=True,
                      settings=CelerySettings(retry_base=0.01, retry_max=0.02, max_retries=2))
    with Session(sqlite_engine) as session, session.begin():
        tx_id = publish(session, "Eager", {"n": 1}, outbox=outbox)
    result = app.tasks[RELAY_TASK].apply(args=[[tx_id]])
    rocketbox_state(app).close()
    assert result.failed() and isinstance(result.result, RelayError)
    assert relayed_ids(sqlite_engine) == set()
    with Session(sqlite_engine) as session:  # no attempt counted, claim released
        row = session.get_one(TransactionRow, tx_id)
        assert row.attempts == 0 and row.claimed_by is None and not row.parked


@pytest.mark.timeout(30)
def test_claims_of_dead_relays_of_this_host_are_released_others_are_left_to_their_lease(
        sqlite_engine: Engine) -> None:
    outbox = Outbox(engine=sqlite_engine)
    with Session(sqlite_engine) as session, session.begin():
        ids = [publish(session, "Claims", {"n": n}, outbox=outbox) for n in range(4)]
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead_pid = child.pid  # exited and reaped: no process has it (barring reuse, unlikely)
    host = socket.gethostname()
    owners = [f"{host}:{dead_pid}:task", f"{host}:{os.getpid()}:sweeper",
              f"elsewhere:{dead_pid}:task", None]
    until = datetime.now(UTC) + timedelta(seconds=300)
    with sqlite_engine.begin() as conn:
        for tx_id, owner in zip(ids, owners, strict=True):
            conn.execute(update(tx_table).where(tx_table.c.tx_id == tx_id).values(
                claimed_by=owner, claimed_until=until if owner else None))
    assert release_dead_claims(sqlite_engine) == 1
    with sqlite_engine.connect() as conn:
        rows = conn.execute(select(tx_table.c.tx_id, tx_table.c.claimed_by))
        left = {tx_id: by for tx_id, by in rows}
    assert [left[tx] for tx in ids] == [None, owners[1], owners[2], None]

