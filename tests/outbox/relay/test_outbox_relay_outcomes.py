"""One bad row never fails its batch: each row gets its own outcome from the real broker.

The broker refuses some requests whole: a batch holding one row whose topic
the account may not publish to (ACL), or a batch whose frame is over the size
limit. The relay must still relay the valid rows of that batch, and only the
row at fault counts an attempt and records its own error.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from broker_lite.client import Admin
from outbox import BrokerLitePublisher, Outbox, Relay, RelaySettings, publish
from outbox.models import transaction_table as t
from tests.outbox.relay.outbox_relay_support import (
    FAST_BROKER,
    broker_records,
    commit_counts,
    relayed_ids,
)
from tests.support import start_broker_lite, wait_until

SETTINGS = RelaySettings(batch_size=50, max_attempts=10, backoff_base=0.01, backoff_max=0.02,
                         jitter=0.0, broker_timeout=5.0)
ACL = {"accounts": [{"access_key": "shop", "secret_key": "shop-secret",
                     "topic_perms": {"Orders": "PUB"}, "default_topic_perm": "DENY"}]}


def _publish_all(outbox: Outbox, messages: list[tuple[str, object]]) -> list[str]:
    """One transaction per message, so the relay claims them all in one batch."""
    ids = []
    for topic, body in messages:
        with Session(outbox.engine) as session, session.begin():
            ids.append(publish(session, topic, body, outbox=outbox))
    return ids


def _rows(engine: Engine) -> dict[str, tuple[int, str | None, bool]]:
    with engine.connect() as conn:
        return {r.tx_id: (r.attempts, r.last_error, r.relayed_at is not None) for r in
                conn.execute(select(t.c.tx_id, t.c.attempts, t.c.last_error, t.c.relayed_at))}


def _one_pass(outbox: Outbox, seen_topics: set[str] | None = None) -> int:
    publisher = BrokerLitePublisher(outbox)
    try:
        report = Relay(outbox, publisher, seen_topics=seen_topics).run_once()
    finally:
        publisher.close()
    return report.claimed


@pytest.mark.timeout(60)
def test_a_row_refused_by_the_acl_fails_alone_and_its_batch_is_relayed(
        pg_engine: Engine, tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    with start_broker_lite(tmp_path / "broker", [*FAST_BROKER, "--acl", str(acl)]) as broker:
        outbox = Outbox(engine=pg_engine, broker=broker.native, relay=SETTINGS,
                        access_key="shop", secret_key="shop-secret")
        ids = _publish_all(outbox, [("Orders", {"n": 1}), ("Orders", {"n": 2}),
                                    ("Oders", {"n": 3}), ("Orders", {"n": 4}),
                                    ("Orders", {"n": 5})])
        typo = ids[2]
        assert _one_pass(outbox) == 5  # all in one batch

        rows = _rows(pg_engine)
        assert relayed_ids(pg_engine) == set(ids) - {typo}
        assert {rows[tx][0] for tx in ids if tx != typo} == {0}
        assert {rows[tx][1] for tx in ids if tx != typo} == {None}
        attempts, error, relayed = rows[typo]
        assert (attempts, relayed) == (1, False)
        assert error is not None and "'Oders'" in error and "needs Pub on Topic:Oders" in error
        records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx: 1 for tx in ids if tx != typo}


@pytest.mark.timeout(90)
def test_a_row_over_the_frame_limit_fails_alone_and_its_batch_is_relayed(
        pg_engine: Engine, tmp_path: Path) -> None:
    # the broker takes 16 MB bodies but frames of 8 MB (its default): a 9 MB row
    # cannot go in any request, and in a batch it made the whole request too large
    with start_broker_lite(tmp_path / "broker",
                           [*FAST_BROKER, "--max-message-size", "16M"]) as broker:
        outbox = Outbox(engine=pg_engine, broker=broker.native, relay=SETTINGS,
                        max_body_size=16 << 20)
        big = b"x" * (9 << 20)
        ids = _publish_all(outbox, [("Orders", {"n": 1}), ("Orders", big),
                                    ("Oders", {"n": 3}), ("Orders", {"n": 4})])
        assert _one_pass(outbox) == 4

        rows = _rows(pg_engine)
        assert relayed_ids(pg_engine) == set(ids) - {ids[1]}
        assert {rows[tx][0] for tx in ids if tx != ids[1]} == {0}
        attempts, error, relayed = rows[ids[1]]
        assert (attempts, relayed) == (1, False)
        assert error is not None and "frame limit" in error
        records = broker_records(broker.data_dir)
    assert commit_counts(records) == {tx: 1 for tx in ids if tx != ids[1]}


@pytest.mark.timeout(60)
def test_a_typo_topic_is_refused_by_name_and_never_created(
        pg_engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    seen: set[str] = set()  # one worker's relays share theirs, as RocketboxState.relay does
    # what `broker-lite serve` does without --auto-create-topics (the default)
    with start_broker_lite(tmp_path / "broker",
                           [*FAST_BROKER, "--no-auto-create-topics"]) as broker:
        with Admin(broker.native) as admin:
            admin.create_topic("Orders")
        outbox = Outbox(engine=pg_engine, broker=broker.native, relay=SETTINGS)
        ids = _publish_all(outbox, [("Orders", {"n": 1}), ("Oders", {"n": 2}),
                                    ("Orders", {"n": 3})])
        with caplog.at_level(logging.WARNING, logger="rocketbox.relay"):
            assert _one_pass(outbox, seen) == 3
            wait_until(lambda: _one_pass(outbox, seen) == 1, timeout=20,  # once its backoff is over
                       message="the typo row was not tried again")
        rows = _rows(pg_engine)
        assert relayed_ids(pg_engine) == {ids[0], ids[2]}
        attempts, error, relayed = rows[ids[1]]
        assert attempts == 2 and not relayed
        assert error == "topic 'Oders' does not exist (auto-create is off; create it first)"
        with Admin(broker.native) as admin:
            assert "Oders" not in {topic.topic for topic in admin.list_topics()}
    # the relays' log names each topic once, the first time this worker relays to it
    first_time = [r.getMessage() for r in caplog.records if "first time" in r.getMessage()]
    assert sorted(line.split("'")[1] for line in first_time) == ["Oders", "Orders"]
