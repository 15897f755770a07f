"""The record of a relay pass finds its rows by primary key, whatever the statistics say.

On an analyzed table where no row is claimed (most rows relayed: what autovacuum sees
in production), PostgreSQL estimated one row for ``claimed_by = <the pass's name>`` and
read the whole table for it, then compared each row found with every row of the pass.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from outbox import BrokerLitePublisher, Outbox, Relay, publish
from outbox.notified import _READ
from outbox.relay_records import RECORD_PG, RECORD_PG_READ, encode_rows
from tests.outbox.relay.outbox_relay_support import fast_relay
from tests.support import BrokerLiteServer

pytestmark = pytest.mark.postgres

ROWS = 20_000
PASS = 200


def _fill(engine: Engine) -> list[str]:
    """``ROWS`` relayed rows, analyzed; then ``PASS`` of them claimed by ``me``."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO rocketbox_transaction (tx_id, seq, producer_group, topic, body, "
            "state, created_at, next_attempt_at, relayed_at) "
            "SELECT 'tx-' || i, i, 'g', 'T', '\\x00'::bytea, 'COMMIT', now(), now(), now() "
            f"FROM generate_series(1, {ROWS}) AS i")
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE rocketbox_transaction")
    ids = [f"tx-{i}" for i in range(1, ROWS, ROWS // PASS)][:PASS]
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE rocketbox_transaction SET claimed_by = 'me', "
                             "relayed_at = NULL WHERE tx_id = ANY(%(ids)s)", {"ids": ids})
    return ids


@pytest.mark.timeout(120)
def test_the_record_walks_the_primary_key_and_marks_only_its_claimed_rows(
        pg_engine: Engine) -> None:
    ids = _fill(pg_engine)
    mine = ids[: PASS // 2]
    params = {"b_me": "me", "b_now": datetime.now(UTC), "claimed_by": None,
              "claimed_until": None, "last_error": None,
              "b_rows": encode_rows([(tx, i, i + 1) for i, tx in enumerate(ids)]).decode()}
    sql = str(RECORD_PG.compile(dialect=pg_engine.dialect))
    with pg_engine.begin() as conn:
        # another relay took half of the rows over (its lease, its name): the fence holds
        conn.exec_driver_sql("UPDATE rocketbox_transaction SET claimed_by = 'other' "
                             "WHERE tx_id = ANY(%(ids)s)", {"ids": ids[PASS // 2:]})
        plan = json.dumps(conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql,
                                               params).scalar_one())
        marked = conn.exec_driver_sql(sql, params).rowcount
        rows = dict(conn.exec_driver_sql(
            "SELECT tx_id, commit_offset FROM rocketbox_transaction "
            "WHERE relayed_at IS NOT NULL AND tx_id = ANY(%(ids)s)", {"ids": ids}).all())
    assert "Seq Scan" not in plan
    assert "pk_rocketbox_transaction" in plan
    assert marked == len(mine)
    assert rows == {tx: i + 1 for i, tx in enumerate(mine)}


@pytest.mark.timeout(120)
def test_the_read_of_named_rows_and_its_record_walk_the_primary_key(
        pg_engine: Engine) -> None:
    """The leading listener's read and record (outbox/notified.py): their due tests match
    partial indexes of unrelayed rows, which PostgreSQL walked, dead entries and all, where
    the statistics said few rows were pending (the read grew from 0.3 to 1.3 ms over 6,000
    rows). Both find their rows by primary key."""
    ids = _fill(pg_engine)
    mine = ids[: PASS // 2]
    with pg_engine.begin() as conn:
        conn.exec_driver_sql("UPDATE rocketbox_transaction SET claimed_by = NULL "
                             "WHERE tx_id = ANY(%(ids)s)", {"ids": mine})
        read_plan = json.dumps(conn.exec_driver_sql(
            "EXPLAIN (FORMAT JSON) " + _READ, (ids,)).scalar_one())
        # the claimed half holds no live lease either (claimed_until is NULL): all are due
        assert len(conn.exec_driver_sql(_READ, (ids,)).all()) == PASS
        conn.exec_driver_sql("UPDATE rocketbox_transaction SET claimed_until = now() + "
                             "interval '1 hour' WHERE tx_id = ANY(%(ids)s)",
                             {"ids": ids[PASS // 2:]})
        params = {"b_now": datetime.now(UTC), "claimed_by": None, "claimed_until": None,
                  "last_error": None,
                  "b_rows": encode_rows([(tx, i, i + 1) for i, tx in enumerate(ids)]).decode()}
        sql = str(RECORD_PG_READ.compile(dialect=pg_engine.dialect))
        record_plan = json.dumps(conn.exec_driver_sql("EXPLAIN (FORMAT JSON) " + sql,
                                                      params).scalar_one())
        marked = conn.exec_driver_sql(sql, params).rowcount
    for plan in (read_plan, record_plan):
        assert "Seq Scan" not in plan
        assert "pk_rocketbox_transaction" in plan
        assert "ix_rocketbox_transaction_pending" not in plan
        assert "ix_rocketbox_transaction_group_seq" not in plan
    assert marked == len(mine)  # a row under a live lease is its claimer's to record


@pytest.mark.timeout(90)
def test_a_relayed_pass_is_recorded_with_a_plan_for_its_own_values(
        pg_engine: Engine, broker: BrokerLiteServer) -> None:
    """Once psycopg had prepared the record (five passes on a connection), PostgreSQL's
    generic plan for it got slower with every relayed row (0.44 ms after 2,000 rows, 0.97
    after 8,000; docs/outbox.md). It is sent in a pipeline that asks for a custom plan:
    after a dozen one-row passes on one session, every row is relayed and the prepared
    record has no generic plan (fails with the record back in autocommit)."""
    engine = create_engine(pg_engine.url, pool_size=1, max_overflow=0)  # one session
    outbox = Outbox(engine=engine, broker=broker.native, relay=fast_relay())
    publisher = BrokerLitePublisher(outbox)
    ids: list[str] = []
    try:
        relay = Relay(outbox, publisher)
        for i in range(12):
            with Session(engine) as session, session.begin():
                ids.append(publish(session, "Planned", {"i": i}, outbox=outbox))
            assert relay.run_once().relayed == 1
        with engine.connect() as conn:
            plans = conn.execute(text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE 'UPDATE rocketbox_transaction SET %relayed_at=%'")).all()
            relayed = conn.execute(text(
                "SELECT count(*) FROM rocketbox_transaction WHERE relayed_at IS NOT NULL "
                "AND claimed_by IS NULL AND tx_id = ANY(:ids)"), {"ids": ids}).scalar_one()
    finally:
        publisher.close()
        engine.dispose()
    assert relayed == 12
    assert len(plans) == 1, plans  # psycopg prepared it
    generic, custom = plans[0]
    assert generic == 0 and custom >= 6, plans
