"""The wake-up lane (outbox/celery/listen.py): PostgreSQL LISTEN/NOTIFY next to the tasks.

Real PostgreSQL, broker_lite and Celery workers on Redis. The web side's
Celery broker is a port where nothing listens, so no ``rocketbox.relay``
task can be enqueued: a row relayed promptly by a worker without a sweeper
was relayed by its wake-up.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, RelaySettings, metadata, migrate
from outbox.celery import CelerySettings, celery_on_commit, make_celery, rocketbox_state
from outbox.celery.hooks import WakeHook
from outbox.celery.listen import APPLICATION_NAME, CHANNEL, Listener, ListenStep
from outbox.errors import ConfigurationError
from outbox.publish import publish
from outbox.targets import HalfOutcome, OutgoingMessage, Publisher
from tests.outbox.celery.rocketbox_celery_support import (
    CELERY,
    CeleryStack,
    Proc,
    broker_records,
    commit,
    commit_counts,
    hooked_outbox,
    relayed_ids,
    running,
    wait_relayed,
)
from tests.support import BrokerLiteServer, PostgresServer, free_port, wait_until
from tests.support.publishers import PassThrough

WAKE = CelerySettings(sweep_interval=0, listen=True)
SILENT = CelerySettings(sweep_interval=0, listen=False)


def listen_worker(name: str, stack: CeleryStack, broker: str, *,
                  sweep: str = "0", **extra: str) -> contextlib.AbstractContextManager[Proc]:
    """``celery -A tests.outbox.celery.rocketbox_listen_app worker`` (the listener on; no
    sweeper unless ``sweep``; ``extra``: more of the app's environment)."""
    argv = [str(CELERY), "-A", "tests.outbox.celery.rocketbox_listen_app", "worker",
            "--pool=threads", "--concurrency=2", "--loglevel=INFO", "--without-mingle",
            "--without-gossip", "--without-heartbeat", "-n", f"{name}@%h"]
    return running(name, argv, stack.env(broker, RB_TEST_SWEEP=sweep,
                                         RB_TEST_SWEEP_MIN_AGE="0.2", **extra), stack.tmp)


def listening_backends(stack: CeleryStack) -> list[int]:
    with stack.engine.connect() as conn:
        return list(conn.execute(text(
            "SELECT pid FROM pg_stat_activity WHERE application_name = :a "
            "AND pid <> pg_backend_pid()"), {"a": APPLICATION_NAME}).scalars())


@pytest.mark.timeout(120)
def test_a_wake_up_relays_at_once_without_a_task_or_a_sweep(
        stack: CeleryStack, broker: BrokerLiteServer, caplog: pytest.LogCaptureFixture) -> None:
    engine = stack.engine
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"  # no task can be enqueued
    waking = hooked_outbox(engine, broker.native, dead_redis, settings=WAKE)
    silent = hooked_outbox(engine, broker.native, dead_redis, settings=SILENT)
    with listen_worker("listen", stack, broker.native) as worker:  # no sweeper
        wait_until(lambda: listening_backends(stack), timeout=20,
                   message=lambda: worker.log_tail())
        # a commit whose wake-up was lost: nothing in this setup can relay it yet
        lost = commit(engine, silent, 1, "Woken")
        assert "the sweeper will relay them" in caplog.text
        assert relayed_ids(engine) == set()
        started = time.monotonic()
        woken = commit(engine, waking, 3, "Woken")
        # the next wake-up relays its rows, and the leader's catch-up claim after its
        # first pass every due row, the lost one's too
        wait_relayed(engine, {*lost, *woken}, worker, timeout=20)
        took = time.monotonic() - started
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in [*lost, *woken]}
    assert took < 10, took


@pytest.mark.timeout(120)
def test_a_lost_wake_up_is_relayed_by_the_sweep(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    silent = hooked_outbox(engine, broker.native, dead_redis, settings=SILENT)
    with listen_worker("listen-sweep", stack, broker.native, sweep="0.5") as worker:
        wait_until(lambda: listening_backends(stack), timeout=20,
                   message=lambda: worker.log_tail())
        ids = commit(engine, silent, 3, "Swept")  # no NOTIFY, no task
        wait_relayed(engine, set(ids), worker, timeout=30)
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in ids}


@pytest.mark.timeout(120)
def test_the_listener_listens_again_after_its_connection_is_killed(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    outbox = Outbox(engine=engine, broker=broker.native, relay=RelaySettings(broker_timeout=2.0))
    state = rocketbox_state(make_celery(outbox, broker_url=dead_redis, settings=WAKE))
    fatal: list[str] = []
    listener = Listener(state, on_fatal=fatal.append, retry_seconds=0.1, wait_seconds=0.1)
    waking = dataclasses.replace(outbox, on_commit=celery_on_commit(
        make_celery(outbox, broker_url=dead_redis, settings=WAKE)))
    listener.start()
    try:
        wait_until(lambda: listening_backends(stack), timeout=20)
        [first] = listening_backends(stack)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": first}).scalar()
        wait_until(lambda: [p for p in listening_backends(stack) if p != first], timeout=20)
        ids = commit(engine, waking, 2, "Again")
        wait_until(lambda: relayed_ids(engine) == set(ids), timeout=20)
    finally:
        listener.stop()
    assert fatal == []
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in ids}


@pytest.mark.timeout(60)
def test_on_sqlite_nothing_listens_and_the_hook_only_enqueues(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'app.sqlite'}")
    metadata.create_all(engine)
    queue_url = f"sqla+sqlite:///{tmp_path / 'celery.sqlite'}"
    outbox = Outbox(engine=engine, broker="127.0.0.1:1")
    app = make_celery(outbox, broker_url=queue_url,
                      settings=dataclasses.replace(WAKE, polling_interval=0.05))
    assert ListenStep not in app.steps["worker"]
    hooked = dataclasses.replace(outbox, on_commit=celery_on_commit(app, window=0))
    with caplog.at_level(logging.WARNING, logger="rocketbox.celery"):
        ids = commit(engine, hooked, 2, "Embedded")
    assert "notify" not in caplog.text.lower() and "could not" not in caplog.text
    queue = create_engine(queue_url.removeprefix("sqla+"))
    with queue.connect() as conn:
        bodies = conn.execute(text("SELECT payload FROM kombu_message")).scalars().all()
    queue.dispose()
    tasks = [base64.b64decode(json.loads(b)["body"]).decode() for b in bodies]
    assert len(tasks) == 2 and all(tx in task for tx, task in zip(ids, tasks, strict=True)), tasks
    engine.dispose()


class RecordingWake(WakeHook):
    """The wake-up hook, with the ids it was called with kept."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.calls: list[list[str]] = []

    def __call__(self, tx_ids: Sequence[str]) -> None:
        self.calls.append(list(tx_ids))
        super().__call__(tx_ids)


def notifications(conn: psycopg.Connection[Any], timeout: float, *, until: int = 0
                  ) -> list[tuple[str, int, str]]:
    """``(channel, sending backend pid, payload)`` of what ``conn`` receives within
    ``timeout`` s (or until ``until`` have come)."""
    return [(n.channel, n.pid, n.payload)
            for n in conn.notifies(timeout=timeout, stop_after=until or None)]


@pytest.fixture
def migrated(postgres_server: PostgresServer) -> Iterator[Engine]:
    """A new database migrated to head (``rocketbox_publish()`` too: outbox.at_commit)."""
    engine = create_engine(postgres_server.create_database(f"rbw_{uuid.uuid4().hex[:12]}").url)
    try:
        migrate.upgrade(engine)
        yield engine
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_by_default_on_postgresql_the_commit_itself_wakes_the_relays(migrated: Engine) -> None:
    engine = migrated
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    outbox = Outbox(engine=engine, broker="127.0.0.1:1")
    app = make_celery(outbox, broker_url=dead_redis, settings=CelerySettings(sweep_interval=0))
    # the default: the hook wakes through PostgreSQL and the worker listens; no task
    assert isinstance(celery_on_commit(app), WakeHook)
    assert ListenStep in app.steps["worker"]
    hook = RecordingWake(engine)
    hooked = dataclasses.replace(outbox, on_commit=hook)
    libpq = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as listening:
        listening.execute(f"LISTEN {CHANNEL}")
        with Session(engine) as session, session.begin():
            pid = session.connection().exec_driver_sql("SELECT pg_backend_pid()").scalar()
            ids = [publish(session, "Woken", {"n": n}, outbox=hooked) for n in range(3)]
            assert notifications(listening, 0.3) == []  # nothing before the commit
        # one wake-up per row, naming it, sent by the committing session itself: no
        # statement and no connection after the commit
        assert notifications(listening, 5.0, until=3) == [
            (CHANNEL, pid, json.dumps([tx_id], separators=(",", ":"))) for tx_id in ids]
        assert notifications(listening, 0.3) == []
        assert hook.calls == []
        # a rolled-back transaction wakes nobody
        with Session(engine) as session, session.begin():
            publish(session, "Woken", {"n": 9}, outbox=hooked)
            session.rollback()
        assert notifications(listening, 0.3) == []
        # a row sent with the COMMIT (outbox.at_commit) is woken by the hook after it
        with Session(engine) as session, session.begin():
            held = publish(session, "Woken", {"n": 10}, outbox=hooked, at_commit=True)
        assert hook.calls == [[held]]
        # RecordingWake notifies as WakeHook does: after the commit, naming the ids
        assert [(channel, json.loads(payload)) for channel, _pid, payload
                in notifications(listening, 5.0, until=1)] == [(CHANNEL, [held])]
    with engine.connect() as conn:
        stored = set(conn.execute(text("SELECT tx_id FROM rocketbox_transaction")).scalars())
    assert stored == {*ids, held}


class HeldFirstPass(PassThrough):
    """Holds the first pass's halves until :attr:`release` is set (:attr:`holding` tells
    when it is held); every other call goes through at once."""

    def __init__(self, inner: Publisher) -> None:
        super().__init__(inner)
        self.holding = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._first = True

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        with self._lock:
            first, self._first = self._first, False
        if first:
            self.holding.set()
            self.release.wait(30)
        return super().send_halves(messages)


@contextlib.contextmanager
def held_listener(stack: CeleryStack, broker: BrokerLiteServer, held: type[HeldFirstPass],
                  settings: CelerySettings) -> Iterator[tuple[list[HeldFirstPass], Outbox,
                                                                 list[str]]]:
    """A :class:`Listener` whose passes go through ``held`` publishers (the first pass
    waits for its ``release``): the publishers, an outbox whose commits wake it, and
    the fatal reasons it reported. Every hold is released on the way out."""
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    outbox = Outbox(engine=stack.engine, broker=broker.native,
                    relay=RelaySettings(broker_timeout=2.0))
    publishers: list[HeldFirstPass] = []

    def make(o: Outbox) -> Publisher:
        publishers.append(held(BrokerLitePublisher(o)))
        return publishers[-1]

    state = rocketbox_state(make_celery(outbox, broker_url=dead_redis, settings=settings,
                                        publisher_factory=make))
    fatal: list[str] = []
    listener = Listener(state, on_fatal=fatal.append, wait_seconds=0.1)
    waking = dataclasses.replace(outbox, on_commit=celery_on_commit(
        make_celery(outbox, broker_url=dead_redis, settings=WAKE)))
    listener.start()
    try:
        wait_until(lambda: listening_backends(stack), timeout=20)
        yield publishers, waking, fatal
    finally:
        for publisher in publishers:
            publisher.release.set()
        listener.stop()
        state.close()


@pytest.mark.timeout(120)
def test_a_wake_up_during_a_pass_is_relayed_by_an_idle_lane_at_once(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    lanes = dataclasses.replace(WAKE, listen_lanes=2)
    with held_listener(stack, broker, HeldFirstPass, lanes) as (publishers, waking, fatal):
        first = commit(engine, waking, 1, "Lanes")
        wait_until(lambda: publishers and publishers[0].holding.is_set(), timeout=20)
        second = commit(engine, waking, 2, "Lanes")
        # the first pass is still held: the other lane relays the second commit meanwhile
        wait_until(lambda: relayed_ids(engine) == set(second), timeout=20,
                   message=lambda: f"relayed {relayed_ids(engine)}")
        publishers[0].release.set()
        wait_until(lambda: relayed_ids(engine) == {*first, *second}, timeout=20)
    assert fatal == []
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in [*first, *second]}


class ThreadsSeen(HeldFirstPass):
    """:class:`HeldFirstPass` that also keeps the name of each calling thread."""

    def __init__(self, inner: Publisher) -> None:
        super().__init__(inner)
        self.threads: set[str] = set()

    def send_halves(self, messages: Sequence[OutgoingMessage]) -> list[HalfOutcome]:
        self.threads.add(threading.current_thread().name)
        return super().send_halves(messages)


@pytest.mark.timeout(120)
def test_one_lane_relays_on_the_listening_thread_and_takes_the_wake_ups_of_a_pass_after_it(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    assert WAKE.listen_lanes == 1  # the default
    with held_listener(stack, broker, ThreadsSeen, WAKE) as (publishers, waking, fatal):
        first = commit(engine, waking, 1, "OneLane")
        wait_until(lambda: publishers and publishers[0].holding.is_set(), timeout=20)
        # committed while the only lane's pass is held: their wake-ups wait for it
        second = commit(engine, waking, 2, "OneLane")
        publishers[0].release.set()
        wait_until(lambda: relayed_ids(engine) == {*first, *second}, timeout=20,
                   message=lambda: f"relayed {relayed_ids(engine)}")
    assert fatal == []
    # no hand-off: the thread that read the notifications relayed the rows
    assert [cast(ThreadsSeen, p).threads for p in publishers] == [{"rocketbox-listener"}]
    assert commit_counts(broker_records(broker.data_dir)) == {tx: 1 for tx in [*first, *second]}


def test_listen_lanes_below_one_are_refused_naming_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="listen_lanes must be >= 1, got 0") as caught:
        CelerySettings(listen_lanes=0)
    assert caught.value.setting == "listen_lanes"


@pytest.mark.timeout(120)
def test_a_listening_worker_killed_between_half_and_end_leaves_one_commit(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    marker = stack.tmp / "killed"
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"  # no task: only the wake-up relays
    waking = hooked_outbox(engine, broker.native, dead_redis, settings=WAKE)
    with listen_worker("doomed", stack, broker.native, RB_TEST_LEASE="2",
                       RB_TEST_KILL_AFTER_HALVES=str(marker)) as doomed:
        wait_until(lambda: listening_backends(stack), timeout=20,
                   message=lambda: doomed.log_tail())
        [tx_id] = commit(engine, waking, 1, "Killed")
        wait_until(lambda: not doomed.alive(), timeout=20, message=doomed.log_tail)
    assert doomed.returncode == -9  # kill -9 after the half, before its end
    assert marker.read_text() == tx_id
    assert relayed_ids(engine) == set()
    # a fresh listening worker's sweeper takes the dead worker's claim back and relays it
    with listen_worker("after", stack, broker.native, sweep="0.3") as after:
        wait_relayed(engine, {tx_id}, after, timeout=30)
    assert commit_counts(broker_records(broker.data_dir)) == {tx_id: 1}
