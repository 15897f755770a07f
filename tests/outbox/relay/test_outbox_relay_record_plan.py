"""The record of a relay pass finds its rows by primary key, whatever the statistics say.

On an analyzed table where no row is claimed (most rows relayed: what autovacuum sees
in production), PostgreSQL estimated one row for ``claimed_by = <the pass's name>`` and
read the whole table for it, then compared each row found with every row of the pass.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine

from outbox.relay import _RECORD_PG, _encode_rows

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
              "b_rows": _encode_rows([(tx, i, i + 1) for i, tx in enumerate(ids)]).decode()}
    sql = str(_RECORD_PG.compile(dialect=pg_engine.dialect))
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
