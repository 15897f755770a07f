"""A target's own relay defaults (``relay_tuning``) meet the user's settings.

``RelaySettings.tuned`` fills only what the user left unset; broker_lite
(real, on real PostgreSQL) declares its own: a pass claims 500 rows and a
drain runs 2 lanes, where the library's defaults are 200 and 3.
"""

from __future__ import annotations

import pickle

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings, publish
from outbox.errors import ConfigurationError
from outbox.targets.base import RelayTuning, relay_tuning
from outbox.targets.broker_lite import BrokerLiteTarget
from tests.support import BrokerLiteServer


@pytest.mark.timeout(30)
def test_tuned_fills_only_what_the_user_left_unset() -> None:
    library = RelaySettings()
    tuned = library.tuned(batch_size=900, drain_lanes=9)
    assert (tuned.batch_size, tuned.drain_lanes) == (900, 9)
    # a tuned value is still the library's to replace (a second target's tuning)
    assert tuned.tuned(batch_size=40).batch_size == 40
    # the user's values win, even the library's default numbers written out
    mine = RelaySettings(batch_size=200, drain_lanes=3).tuned(batch_size=900, drain_lanes=9)
    assert (mine.batch_size, mine.drain_lanes) == (200, 3)
    half = RelaySettings(drain_lanes=2).tuned(batch_size=900, drain_lanes=9)
    assert (half.batch_size, half.drain_lanes) == (900, 2)
    assert library.tuned() is library
    # the settings still compare, print and pickle as plain numbers
    assert RelaySettings() == RelaySettings(batch_size=200, drain_lanes=3)
    assert "batch_size=200" in repr(library)
    assert pickle.loads(pickle.dumps(tuned)) == tuned
    with pytest.raises(ConfigurationError, match="drain_lanes"):
        RelaySettings(drain_lanes=0)


@pytest.mark.timeout(30)
def test_relay_tuning_reads_the_publishers_target() -> None:
    class Declares:
        relay_tuning = RelayTuning(batch_size=5)

    class Wraps:
        target = Declares()

    assert relay_tuning(Wraps()) == RelayTuning(batch_size=5)
    assert relay_tuning(Declares()) == RelayTuning(batch_size=5)
    assert relay_tuning(object()) == RelayTuning()


@pytest.mark.timeout(60)
def test_broker_lite_relays_with_its_own_tuning_where_the_user_set_none(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    outbox = Outbox(engine=pg_engine, broker=broker.native,
                    relay=RelaySettings(lease_seconds=10.0, broker_timeout=5.0))
    own = BrokerLiteTarget.relay_tuning
    assert (own.batch_size, own.drain_lanes) == (500, 2)
    assert (RelaySettings().batch_size, RelaySettings().drain_lanes) == (200, 3)
    with Session(pg_engine) as session, session.begin():
        ids = [publish(session, "Tune", {"i": i}, outbox=outbox) for i in range(520)]
    publisher = BrokerLitePublisher(outbox)
    try:
        relay = Relay(outbox, publisher)
        assert (relay.settings.batch_size, relay.settings.drain_lanes) == (500, 2)
        first = relay.run_once()
        assert (first.claimed, first.relayed) == (500, 500)
        assert relay.drain().relayed == len(ids) - 500
        # a value the user sets wins, even the library's own
        mine = Relay(Outbox(engine=pg_engine, broker=broker.native,
                            relay=RelaySettings(batch_size=200)), publisher)
        assert (mine.settings.batch_size, mine.settings.drain_lanes) == (200, 2)
    finally:
        publisher.close()
