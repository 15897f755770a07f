"""The NATS target's own relay defaults (``NatsTarget.relay_tuning``, docs/nats.md).

Against real PostgreSQL and a real nats-server: a relay whose user left
``batch_size`` and ``drain_lanes`` unset takes the target's values (a pass
claims the target's batch), and a user's explicit setting wins, even one equal
to the library's default. Every row still lands in the stream exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from outbox import Outbox, Relay, RelaySettings
from outbox.publish import publish
from outbox.targets.choose import publisher_for
from outbox.targets.nats import NatsTarget
from tests.support import PostgresServer
from tests.support.nats_server import NatsServer
from tests.support.outbox_db import pg_outbox_database
from tests.targets.nats.nats_support import create_stream, relayed, stored

#: fast retries, so the stream's duplicate window may be short; batch and lanes unset
UNSET = RelaySettings(lease_seconds=10.0, max_attempts=3, backoff_base=0.01, backoff_max=0.05,
                      jitter=0.0, broker_timeout=5.0)


@pytest.fixture
def engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    with pg_outbox_database(postgres_server, "natstune", pool_size=12) as (engine, _url):
        yield engine


def _commit(outbox: Outbox, topic: str, count: int) -> list[str]:
    with Session(outbox.engine) as session, session.begin():
        return [publish(session, topic, {"i": i}, outbox=outbox) for i in range(count)]


@pytest.mark.timeout(180)
def test_target_defaults_apply_when_unset_and_explicit_settings_win(
        engine: Engine, nats_server: NatsServer) -> None:
    tuning = NatsTarget.relay_tuning
    library = RelaySettings()
    # the target tunes both, away from the library's defaults (else this test proves nothing)
    assert tuning.batch_size is not None and tuning.batch_size != library.batch_size
    assert tuning.drain_lanes is not None and tuning.drain_lanes != library.drain_lanes
    create_stream(nats_server.url, "TUNE", ["Tune"], UNSET)
    unset = Outbox(engine=engine, broker=nats_server.url, relay=UNSET)
    ids = _commit(unset, "Tune", tuning.batch_size + library.batch_size + 50)

    publisher = publisher_for(unset)
    try:
        relay = Relay(unset, publisher)
        assert (relay.settings.batch_size, relay.settings.drain_lanes) == \
            (tuning.batch_size, tuning.drain_lanes)
        first = relay.run_once()  # one pass claims the target's batch
        assert (first.claimed, first.relayed) == (tuning.batch_size, tuning.batch_size)

        # explicit settings win, even the library's default values written out
        explicit = Outbox(engine=engine, broker=nats_server.url,
                          relay=RelaySettings(batch_size=int(library.batch_size),
                                              drain_lanes=int(library.drain_lanes),
                                              lease_seconds=10.0, broker_timeout=5.0))
        mine = Relay(explicit, publisher)
        assert (mine.settings.batch_size, mine.settings.drain_lanes) == \
            (library.batch_size, library.drain_lanes)
        second = mine.run_once()
        assert (second.claimed, second.relayed) == (library.batch_size, library.batch_size)

        # an explicit batch_size alone: the lanes stay the target's
        half = RelaySettings(batch_size=7, lease_seconds=10.0, broker_timeout=5.0)
        assert (Relay(Outbox(engine=engine, broker=nats_server.url, relay=half),
                      publisher).settings.drain_lanes) == tuning.drain_lanes

        rest = relay.drain()  # the target's lanes take the rest
        assert rest.relayed == len(ids) - tuning.batch_size - library.batch_size
    finally:
        publisher.close()
    assert relayed(engine) == set(ids)
    in_stream = [m.tx_id for m in stored(nats_server.url, "TUNE")]
    assert sorted(in_stream) == sorted(ids)  # each row once, none lost
