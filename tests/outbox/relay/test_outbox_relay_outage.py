"""The relay's broker connection during and after an outage (real broker_lite, PostgreSQL)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings, publish
from outbox.errors import BrokerUnreachableError
from outbox.models import transaction_table as t
from outbox.targets.broker_lite import RECONNECT_MAX_DELAY, RECONNECT_WAIT
from tests.outbox.relay.outbox_relay_support import FAST_BROKER, broker_records, commit_counts
from tests.support import free_port, start_broker_lite

SETTINGS = RelaySettings(batch_size=50, lease_seconds=30, broker_timeout=5.0)


def commit(engine: Engine, outbox: Outbox, n: int) -> list[str]:
    with Session(engine) as session, session.begin():
        return [publish(session, "Outage", {"i": i}, outbox=outbox) for i in range(n)]


@pytest.mark.timeout(90)
def test_a_pass_in_an_outage_ends_at_once_and_the_connection_is_back_when_the_broker_is(
        pg_engine: Engine, tmp_path: Path) -> None:
    data_dir, port = tmp_path / "broker", free_port()
    args = [*FAST_BROKER, "--port", str(port)]
    outbox = Outbox(engine=pg_engine, broker=f"127.0.0.1:{port}", relay=SETTINGS)
    publisher = BrokerLitePublisher(outbox)
    back = threading.Event()
    publisher.on_reconnect(back.set)
    try:
        with start_broker_lite(data_dir, args):
            before = commit(pg_engine, outbox, 3)
            assert Relay(outbox, publisher).run_once().relayed == 3
        during = commit(pg_engine, outbox, 5)
        started = time.monotonic()
        with pytest.raises(BrokerUnreachableError):
            Relay(outbox, publisher).run_once()
        held = time.monotonic() - started
        with pg_engine.connect() as conn:  # the claims were given back for the next pass
            claimed = conn.execute(select(t.c.claimed_by).where(t.c.tx_id.in_(during))).all()
        assert {row.claimed_by for row in claimed} == {None}
        with start_broker_lite(data_dir, args):
            ready = time.monotonic()  # the broker printed its ready line
            assert back.wait(RECONNECT_MAX_DELAY + 5), "the relay's connection did not return"
            reconnected = time.monotonic() - ready
            assert Relay(outbox, publisher).run_once().relayed == 5
    finally:
        publisher.close()
    print(f"pass during the outage held {held:.2f}s (broker_timeout {SETTINGS.broker_timeout}s); "
          f"connection back {reconnected:.2f}s after the broker's ready line")
    # a pass waits for a reconnect in progress at most RECONNECT_WAIT, never broker_timeout
    assert held < RECONNECT_WAIT + 2 < SETTINGS.broker_timeout, held
    assert commit_counts(broker_records(data_dir)) == dict.fromkeys(before + during, 1)
