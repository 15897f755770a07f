"""``outbox.replay`` and ``rocketbox replay``: parked rows get a fresh set of attempts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from outbox.cli import main
from outbox.relay import Relay
from outbox.replay import replay
from outbox.targets.broker_lite import BrokerLitePublisher
from tests.outbox.status.outbox_ops_support import (
    OpsDb,
    mark_parked,
    mark_relayed,
    publish_rows,
    row,
    set_rows,
)


def _seed(db: OpsDb) -> list[str]:
    """[parked, parked (claimed), pending, relayed]"""
    ids = publish_rows(db, "orders", 4)
    mark_parked(db, ids[:2], error="broker said no", attempts=10)
    set_rows(db, ids[:2], next_attempt_at=datetime.now(UTC) + timedelta(hours=5))
    set_rows(db, ids[1:2], claimed_by="dead:1", claimed_until=datetime.now(UTC)
             + timedelta(hours=1))
    mark_relayed(db, ids[3:], datetime.now(UTC))
    return ids


@pytest.mark.timeout(60)
def test_replay_unparks_only_parked_rows(ops_db: OpsDb) -> None:
    parked, claimed, pending, relayed = _seed(ops_db)
    now = datetime.now(UTC)
    result = replay(ops_db.engine, [parked, pending, relayed, "NO-SUCH-ROW", parked], now=now)
    assert result.replayed == (parked,)
    assert result.not_parked == (pending,)
    assert result.already_relayed == (relayed,)
    assert result.unknown == ("NO-SUCH-ROW",)
    assert not result.complete

    after = row(ops_db, parked)
    assert (after["parked"], after["attempts"], after["claimed_by"]) == (False, 0, None)
    assert after["last_error"] == "broker said no"  # kept until the next attempt
    assert abs((after["next_attempt_at"].replace(tzinfo=UTC) - now).total_seconds()) < 1
    assert row(ops_db, claimed)["parked"] is True  # not asked for: untouched
    assert row(ops_db, pending)["attempts"] == 0 and row(ops_db, relayed)["relayed_at"]


@pytest.mark.timeout(60)
def test_replay_all_parked_clears_claims_and_the_relay_claims_them(ops_db: OpsDb) -> None:
    parked, claimed, pending, _relayed = _seed(ops_db)
    result = replay(ops_db.engine, all_parked=True)
    assert set(result.replayed) == {parked, claimed} and result.complete
    assert row(ops_db, claimed)["claimed_until"] is None
    assert replay(ops_db.engine, all_parked=True).replayed == ()

    relay = Relay(ops_db.outbox, BrokerLitePublisher(ops_db.outbox), name="test-relay")
    claimed_now = {r.tx_id for r in relay.claim()}  # claiming sends nothing yet
    assert claimed_now == {parked, claimed, pending}


@pytest.mark.timeout(30)
def test_replay_wants_ids_or_all_parked(ops_db: OpsDb) -> None:
    with pytest.raises(ValueError, match="not both"):
        replay(ops_db.engine)
    with pytest.raises(ValueError, match="not both"):
        replay(ops_db.engine, ["X"], all_parked=True)


@pytest.mark.timeout(60)
def test_replay_command(ops_db: OpsDb, capsys: pytest.CaptureFixture[str]) -> None:
    parked, claimed, pending, _relayed = _seed(ops_db)
    assert main(["replay", "--db", ops_db.url, parked]) == 0
    assert capsys.readouterr().out == "replayed 1 parked row(s)\n"

    assert main(["replay", "--db", ops_db.url, parked, "NOPE"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "replayed 0 parked row(s)\n"
    assert f"not parked, left alone: {parked}" in captured.err
    assert "unknown, left alone: NOPE" in captured.err

    assert main(["replay", "--db", ops_db.url, "--all-parked"]) == 0
    assert capsys.readouterr().out == "replayed 1 parked row(s)\n"
    assert row(ops_db, claimed)["parked"] is False
    assert row(ops_db, pending)["parked"] is False


@pytest.mark.timeout(30)
def test_replay_command_usage(ops_db: OpsDb, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--db", ops_db.url]) == 2
    assert capsys.readouterr().err == \
        "rocketbox replay: give TX_IDs or --all-parked (one of the two)\n"
    assert main(["replay", "--db", ops_db.url, "X", "--all-parked"]) == 2
