"""The relay worker against faults: Redis restarts, Redis down, lost tasks, a broker restart.

Real parts only: PostgreSQL, redis-server, broker_lite and Celery workers in
subprocesses (``rocketbox relay`` itself, or the test app's worker).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine

from outbox import Outbox
from outbox.targets.broker_lite import RECONNECT_MAX_DELAY
from tests.outbox.celery.rocketbox_celery_support import (
    HERE,
    REPO,
    CeleryStack,
    Proc,
    RestartableRedis,
    app_env,
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
from tests.support import BrokerLiteServer, RedisServer, start_broker_lite, wait_until


class Producer:
    """Commits units of work on a thread, about one every ``pause`` seconds, until stopped."""

    def __init__(self, engine: Engine, outbox: Outbox, pause: float = 0.01) -> None:
        self.ids: list[str] = []
        self._engine, self._outbox, self._pause = engine, outbox, pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.ids.extend(commit(self._engine, self._outbox, 1))
            self._stop.wait(self._pause)

    def __enter__(self) -> Producer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


class RelayProcess(Proc):
    """``python -m outbox relay ...`` in its own process group, its output in a file."""

    def __init__(self, args: list[str], log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETBOX_")}
        env.update({"PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"})
        super().__init__([sys.executable, "-m", "outbox", "relay", *args], log=log, env=env,
                         cwd=REPO, name="relay")
        self.start()


@pytest.fixture
def relay_process(tmp_path: Path) -> Iterator[list[RelayProcess]]:
    started: list[RelayProcess] = []
    yield started
    for relay in started:
        relay.stop(signal.SIGKILL)


# -- 1. Redis restarts under a running relay -------------------------------------------


RESTARTS = 20


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_twenty_redis_restarts_under_a_backlog_never_stop_the_relay(
        pg_db: tuple[Engine, str], broker: BrokerLiteServer, redis_server: RedisServer,
        tmp_path: Path, relay_process: list[RelayProcess]) -> None:
    engine, url = pg_db
    with RestartableRedis(tmp_path) as rds:
        relay = RelayProcess(["--db", url, "--broker", broker.native, "--celery-broker", rds.url,
                              "--concurrency", "2"], tmp_path / "relay.log")
        relay_process.append(relay)
        outbox = hooked_outbox(engine, broker.native, rds.url)
        wait_until(lambda: "ready." in relay.log_text(), timeout=60, message=relay.log_text)
        with Producer(engine, outbox) as producer:
            for restart in range(RESTARTS):
                # the consumer is back and taking tasks again (a task is unacknowledged in
                # it while another slot waits on BRPOP: the state the old bug needed)
                wait_until(lambda n=restart: relay.log_text().count("Connected to ") > n
                           and _received_since_connect(relay.log_text()), timeout=30,
                           message=relay.log_tail)
                assert relay.alive(), relay.log_tail()
                rds.kill()
                # tasks cannot be enqueued nor consumed now; a second later it is back
                wait_until(lambda n=restart: relay.log_text().count("Connection to broker lost")
                           > n, timeout=20, message=relay.log_tail)
                rds.start()
        ids = set(producer.ids)
        wait_until(lambda: relayed_ids(engine) >= ids, timeout=60,
                   message=lambda: f"{len(ids - relayed_ids(engine))} rows not relayed\n"
                                   + relay.log_tail())
        assert relay.alive(), relay.log_tail()
        log = relay.log_text()
        assert "Unrecoverable error" not in log, log[-3000:]
        assert relay.stop(timeout=30) == 0  # a requested stop is a clean exit
    counts = commit_counts(broker_records(broker.data_dir))
    assert {tx: counts.get(tx) for tx in ids} == dict.fromkeys(ids, 1)


def _received_since_connect(log: str) -> bool:
    tail = log[log.rindex("Connected to "):]
    return "Task rocketbox.relay[" in tail and "received" in tail


# -- fatal errors exit non-zero ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_the_sweeper_lane_dying_stops_the_relay_with_status_1(
        stack: CeleryStack, broker: BrokerLiteServer,
        relay_process: list[RelayProcess]) -> None:
    relay = RelayProcess(["--db", stack.db_url, "--broker", broker.native,
                          "--celery-broker", stack.redis.url], stack.tmp / "relay.log")
    relay_process.append(relay)
    wait_until(lambda: "ready." in relay.log_text(), timeout=60, message=relay.log_text)
    with stack.engine.begin() as conn:  # not an outage: the sweeper cannot work at all any more
        conn.exec_driver_sql("ALTER TABLE rocketbox_transaction RENAME TO moved_away")
    assert relay.wait(60) == 1, relay.log_tail()
    # a missing table is a database fault, named as one, not retried as an outage
    assert "the sweeper lane stopped: database" in relay.log_text(), relay.log_tail()


@pytest.mark.timeout(120)
def test_an_unrecoverable_worker_error_is_exit_status_1(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    env = stack.env(broker.native, RB_TEST_BROKEN_CONSUMER="1")
    # run_worker, as `rocketbox relay` runs it: Celery's worker_main used to return
    # nothing, so the worker's status 1 became 0
    done = subprocess.run([sys.executable, str(HERE / "rocketbox_celery_app.py"), "worker"],
                          env=env, cwd=HERE, capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)
    assert "Unrecoverable error" in done.stdout + done.stderr
    assert done.returncode == 1, done.stderr[-3000:]


# -- 2. the sweeper lane: no Redis, lost tasks ----------------------------------------------


@pytest.mark.timeout(120)
def test_with_redis_down_committed_rows_are_relayed_by_the_sweeper_lane(
        pg_db: tuple[Engine, str], broker: BrokerLiteServer, redis_server: RedisServer,
        tmp_path: Path) -> None:
    engine, url = pg_db
    sweep = 1.0
    with RestartableRedis(tmp_path) as rds:
        env = app_env(db=url, broker=broker.native, celery_broker=rds.url, tmp=tmp_path,
                      RB_TEST_SWEEP=str(sweep))
        outbox = hooked_outbox(engine, broker.native, rds.url)
        with celery_worker("no-redis", env, tmp_path) as worker:
            rds.kill()  # nothing can be enqueued, consumed or scheduled through Redis now
            started = time.monotonic()
            ids = set(commit(engine, outbox, 30))
            wait_relayed(engine, ids, worker, timeout=30)
            took = time.monotonic() - started
            assert worker.alive()
            wait_until(lambda: "sweep relayed" in worker.log_text(), timeout=10)
    print(f"Redis down: 30 commits relayed by the sweeper lane in {took:.2f}s")
    # the bound the docs give: sweep_interval + sweep_min_age (0.2 s), with a margin
    assert took < sweep + 0.2 + 5, took
    assert commit_counts(broker_records(broker.data_dir)) == dict.fromkeys(ids, 1)


@pytest.mark.timeout(120)
def test_tasks_lost_with_redis_are_made_up_for_by_the_sweeper_lane(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine, own = stack.engine, stack.redis
    outbox = hooked_outbox(engine, broker.native, stack.redis.url, window=0)
    ids = set(commit(engine, outbox, 20))  # each enqueued its task; no worker runs yet
    with redis.Redis(host=own.host, port=own.port, db=own.db) as client:
        assert client.llen("rocketbox") > 0
        client.flushdb()  # the tasks are lost, as with a Redis restarted without persistence
    env = stack.env(broker.native,
                    RB_TEST_SWEEP="30")  # only the first sweep, at start, can relay them
    with celery_worker("lost", env, stack.tmp) as worker:
        wait_relayed(engine, ids, worker, timeout=20)
    assert "Task rocketbox.relay[" not in worker.log_text()  # no task did it
    assert commit_counts(broker_records(broker.data_dir)) == dict.fromkeys(ids, 1)


# -- 3. the broker comes back: relaying resumes at once -------------------------------------


@pytest.mark.timeout(150)
def test_relaying_resumes_as_soon_as_the_broker_is_back(stack: CeleryStack) -> None:
    engine = stack.engine
    data_dir, args, address = fixed_port_broker(stack.tmp)
    # sweeps every 60 s and task retries 30 s apart: only the reconnect can explain a
    # prompt recovery
    env = stack.env(address, RB_TEST_SWEEP="60", RB_TEST_RETRY="30")
    outbox = hooked_outbox(engine, address, stack.redis.url)
    with celery_worker("recovery", env, stack.tmp) as worker:
        with start_broker_lite(data_dir, args):
            first = set(commit(engine, outbox, 3))
            wait_relayed(engine, first, worker, timeout=20)
        during = set(commit(engine, outbox, 10))  # their tasks fail: the broker is down
        wait_until(lambda: worker.log_text().count("retry 1 in") >= 1, timeout=30,
                   message=worker.log_tail)
        with start_broker_lite(data_dir, args):
            back = time.monotonic()
            wait_until(lambda: relayed_ids(engine) >= during, timeout=40,
                       message=worker.log_tail)
            took = time.monotonic() - back
    print(f"broker ready -> the rows committed during the outage relayed: {took:.2f}s")
    # the relay's client retries at least every RECONNECT_MAX_DELAY, then wakes the sweeper
    assert took < RECONNECT_MAX_DELAY + 5, took
    assert commit_counts(broker_records(data_dir)) == dict.fromkeys(first | during, 1)


@pytest.mark.timeout(90)
def test_module_entry_run_worker_relays_with_its_sweeper(
        stack: CeleryStack, broker: BrokerLiteServer) -> None:
    engine = stack.engine
    plain = Outbox(engine=engine, broker=broker.native)  # no hook: only the sweeper relays
    with module_entry("entry", "worker", stack.env(broker.native), stack.tmp) as worker:
        ids = set(commit(engine, plain, 5))
        wait_relayed(engine, ids, worker, timeout=20)
        worker.kill(signal.SIGTERM)
        assert worker.returncode == 0
