"""Crashes against a real nats-server: the relay killed between send and mark, and the
server itself killed and restarted while rows stream through (issue 32, NATS half)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from outbox import Outbox, Relay
from outbox.errors import RelayError
from outbox.inbox_nats import NatsInbox
from outbox.models import transaction_table as t
from outbox.targets.choose import publisher_for
from tests.support import PostgresServer
from tests.support.nats_server import NatsServer, start_nats
from tests.support.outbox_db import pg_outbox_database
from tests.support.waiting import wait_until
from tests.targets.nats.nats_support import (
    committed,
    consume,
    create_stream,
    fast_relay,
    relayed,
    stored,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def db(postgres_server: PostgresServer) -> Iterator[tuple[Engine, str]]:
    with pg_outbox_database(postgres_server, "natscrash", pool_size=5) as (engine, url):
        yield engine, url


@pytest.mark.timeout(180)
def test_a_relay_killed_between_the_acks_and_the_mark_resends_and_the_consumer_processes_once(
        db: tuple[Engine, str], nats_server: NatsServer, tmp_path: Path) -> None:
    engine, url = db
    relay = fast_relay()
    outbox = Outbox(engine=engine, broker=nats_server.url, relay=relay)
    create_stream(nats_server.url, "KILLED", ["Killed"], relay)
    ids = committed(outbox, "Killed", 5) + committed(outbox, "Killed", 3, group="g")
    marker = tmp_path / "sent"
    child = subprocess.run([sys.executable, "-m", "tests.targets.nats.relay_child", url,
                            nats_server.url, str(marker)], cwd=REPO, capture_output=True,
                           text=True, timeout=120, check=False)
    assert child.returncode == -9, child.stderr
    assert sorted(marker.read_text().split(",")) == sorted(ids)
    assert [m.tx_id for m in stored(nats_server.url, "KILLED")] == ids  # sent ...
    assert relayed(engine) == set()  # ... and not marked
    with engine.connect() as conn:
        assert all(conn.execute(select(t.c.claimed_by).where(t.c.tx_id.in_(ids))).scalars())

    publisher = publisher_for(outbox)  # a new relay, once the dead one's lease ran out
    try:
        wait_until(lambda: Relay(outbox, publisher).drain() is not None
                   and relayed(engine) == set(ids), timeout=60,
                   message=lambda: f"relayed {len(relayed(engine))} of {len(ids)}")
    finally:
        publisher.close()
    assert [m.tx_id for m in stored(nats_server.url, "KILLED")] == ids  # re-sends dropped

    handled: list[str] = []
    inbox = NatsInbox("audit", lambda _s, msg: handled.append(msg.headers["Nats-Msg-Id"]),
                      outbox=outbox)
    consume(nats_server.url, "KILLED", "audit", inbox,
            until=lambda: inbox.counts["processed"] >= len(ids), timeout=60)
    assert sorted(handled) == sorted(ids)


@pytest.mark.timeout(240)
def test_the_server_killed_and_restarted_mid_stream_loses_nothing(
        db: tuple[Engine, str]) -> None:
    engine, _url = db
    relay = fast_relay(broker_timeout=1.0, max_attempts=50)
    with start_nats() as server:
        outbox = Outbox(engine=engine, broker=server.url, relay=relay)
        create_stream(server.url, "RESTART", ["Restart"], relay)
        stop = threading.Event()
        errors: list[BaseException] = []

        def relaying() -> None:
            publisher = publisher_for(outbox)
            try:
                while not stop.is_set():
                    # the server down: the rows wait, the next pass retries
                    with contextlib.suppress(RelayError):
                        Relay(outbox, publisher).drain()
                    stop.wait(0.02)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                publisher.close()

        worker = threading.Thread(target=relaying, name="relay", daemon=True)
        worker.start()
        try:
            ids = committed(outbox, "Restart", 40)
            wait_until(lambda: len(relayed(engine)) >= 20, timeout=60,
                       message="the relay did not get going")
            server.kill()
            ids += committed(outbox, "Restart", 40)  # committed while the server is down
            server.start_again()
            ids += committed(outbox, "Restart", 40, group="after")
            wait_until(lambda: relayed(engine) == set(ids), timeout=120,
                       message=lambda: f"relayed {len(relayed(engine))} of {len(ids)}")
        finally:
            stop.set()
            worker.join(30)
        assert not errors, errors
        in_stream = [m.tx_id for m in stored(server.url, "RESTART")]
        assert sorted(in_stream) == sorted(ids) and len(in_stream) == len(ids)
        assert in_stream[-40:] == ids[-40:]  # the group after the restart, in commit order
