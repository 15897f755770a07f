"""The claim on PostgreSQL through psycopg 3 (outbox/claims.py): one round trip, same rows.

Real PostgreSQL. The claim's transaction goes in one pipeline; these tests
count its round trips through a forwarder (:mod:`turn_counter`), read the
plan PostgreSQL used (``auto_explain``), and check that a failed pipeline
leaves the pool as it found it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, exc, select, text, update
from sqlalchemy.orm import Session

from outbox import Outbox, publish
from outbox.claims import ROW_COLUMNS, ClaimedRow, claim
from outbox.models import transaction_table as t
from outbox.relay import worker_id
from tests.outbox.relay.outbox_relay_support import fast_relay
from tests.outbox.relay.turn_counter import TurnCounter, counting


def _outbox(engine: Engine) -> Outbox:
    return Outbox(engine=engine, broker="127.0.0.1:1", relay=fast_relay())  # never contacted


def _publish(engine: Engine, n: int, *, group: str | None = None) -> list[str]:
    outbox = _outbox(engine)
    with Session(engine) as session, session.begin():
        return [publish(session, "Claimed", {"i": i}, outbox=outbox, message_group=group,
                        headers={"trace": f"t-{i}", "n": i}) for i in range(n)]


def _as_stored(engine: Engine, ids: list[str]) -> list[ClaimedRow]:
    with engine.connect() as conn:
        return [ClaimedRow(*row) for row in conn.execute(
            select(*ROW_COLUMNS).where(t.c.tx_id.in_(ids)).order_by(t.c.seq))]


def _claims(engine: Engine, ids: list[str]) -> dict[str, tuple[str | None, datetime | None]]:
    with engine.connect() as conn:
        return {row.tx_id: (row.claimed_by, row.claimed_until) for row in conn.execute(
            select(t.c.tx_id, t.c.claimed_by, t.c.claimed_until).where(t.c.tx_id.in_(ids)))}


@pytest.fixture
def proxied(pg_engine: Engine) -> Iterator[tuple[Engine, TurnCounter]]:
    """An engine (one pooled connection) reaching ``pg_engine``'s database through a
    :class:`TurnCounter`, its connection made and warm."""
    url = pg_engine.url
    with counting((url.host or "127.0.0.1", url.port or 5432)) as counter:
        engine = create_engine(url.set(host="127.0.0.1", port=counter.port),
                               pool_size=1, max_overflow=0)
        try:
            with engine.connect() as conn:  # connect, and SQLAlchemy's first queries
                conn.execute(text("SELECT 1"))
            yield engine, counter
        finally:
            engine.dispose()


@pytest.mark.timeout(60)
def test_a_claim_is_one_round_trip_and_returns_the_rows_as_stored(
        pg_engine: Engine, proxied: tuple[Engine, TurnCounter]) -> None:
    engine, counter = proxied
    ids = _publish(pg_engine, 3)
    stored = _as_stored(pg_engine, ids)
    counter.reset()
    rows = claim(_outbox(engine), "claimer-1")
    # BEGIN, SET LOCAL, the UPDATE and COMMIT went together (they were four turns)
    assert counter.turns() == 1
    assert rows == stored  # same values and types as SQLAlchemy reads: JSON, bytes, tz
    assert rows[0].headers == {"trace": "t-0", "n": 0} and isinstance(rows[0].body, bytes)
    now = datetime.now(UTC)
    claims = _claims(pg_engine, ids)  # committed: another connection sees the claim
    assert {by for by, _until in claims.values()} == {"claimer-1"}
    assert all(until is not None and until > now for _by, until in claims.values())
    counter.reset()
    assert claim(_outbox(engine), "claimer-2") == []  # under the first one's lease
    assert counter.turns() == 1
    # the pooled connection is back out of autocommit: a rolled-back write is undone
    with engine.connect() as conn:
        assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
        conn.execute(update(t).where(t.c.tx_id == ids[0]).values(claimed_by="rolled-back"))
        conn.rollback()
    assert _claims(pg_engine, ids)[ids[0]][0] == "claimer-1"


@pytest.mark.timeout(60)
def test_a_group_held_by_another_claim_stays_out_and_the_rest_is_claimed(
        pg_engine: Engine, proxied: tuple[Engine, TurnCounter]) -> None:
    engine, _counter = proxied
    group = _publish(pg_engine, 3, group="g")
    loose = _publish(pg_engine, 2)
    assert [r.tx_id for r in claim(_outbox(pg_engine), "other", limit=1)] == [group[0]]
    rows = claim(_outbox(engine), "claimer")
    # the group's head is in flight elsewhere: its later rows must wait for it
    assert [r.tx_id for r in rows] == loose
    assert {tx: by for tx, (by, _until) in _claims(pg_engine, group).items()} == {
        group[0]: "other", group[1]: None, group[2]: None}


@pytest.mark.timeout(60)
def test_a_claim_on_a_killed_connection_fails_as_sqlalchemys_and_the_next_one_claims(
        pg_engine: Engine, proxied: tuple[Engine, TurnCounter]) -> None:
    engine, _counter = proxied
    ids = _publish(pg_engine, 2)
    with engine.connect() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    with pg_engine.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar()
    with pytest.raises(exc.OperationalError) as failed:
        claim(_outbox(engine), "claimer")
    assert failed.value.connection_invalidated
    assert _claims(pg_engine, ids) == {tx: (None, None) for tx in ids}  # nothing taken
    rows = claim(_outbox(engine), "claimer")  # a new connection from the pool
    assert [r.tx_id for r in rows] == ids


@pytest.mark.timeout(60)
def test_a_claim_walks_the_pending_index_when_statistics_say_the_table_is_empty(
        pg_engine: Engine) -> None:
    # ANALYZE on the empty table, then a backlog: the planner believes a handful of
    # rows are due and would read and sort all of them to pick the oldest.
    with pg_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE rocketbox_transaction"))
    with Session(pg_engine) as session, session.begin():
        outbox = _outbox(pg_engine)
        for i in range(3000):
            publish(session, "Backlog", {"i": i}, outbox=outbox)
    plans: list[str] = []
    engine = create_engine(pg_engine.url, pool_size=1, max_overflow=0)

    @event.listens_for(engine, "connect")
    def explain_every_statement(dbapi_conn: Any, _record: Any) -> None:
        # PostgreSQL sends the plan it ran for each statement as a notice
        dbapi_conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
        for setting in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                        "SET auto_explain.log_level = notice"):
            dbapi_conn.execute(setting)
        dbapi_conn.commit()

    try:
        claimed = claim(_outbox(engine), "claimer")
    finally:
        engine.dispose()
    assert len(claimed) == fast_relay().batch_size
    assert [r.seq for r in claimed] == sorted(r.seq for r in claimed)
    [plan] = [p for p in plans if "SKIP LOCKED" in p]
    assert "Index Scan using ix_rocketbox_transaction_pending" in plan, plan
    assert "Sort" not in plan, plan


def _blocks(engine: Engine, ids: list[str]) -> dict[str, int]:
    """The heap page each row's current version is on (its ``ctid``'s block)."""
    with engine.connect() as conn:
        return {tx_id: int(block) for tx_id, block in conn.execute(text(
            "SELECT tx_id, (ctid::text::point)[0] FROM rocketbox_transaction "
            "WHERE tx_id = ANY(:ids)"), {"ids": ids})}


@pytest.mark.timeout(60)
def test_a_claim_stays_on_its_rows_page_a_hot_update(pg_engine: Engine) -> None:
    """``rocketbox_transaction`` leaves half of each page free (fillfactor 40, revision
    0007), so a claim, which changes no indexed column, writes the row's new version on
    its own page with no index entry (a HOT update) instead of on another page with one
    entry in each of the table's indexes. At fillfactor 100 the pages are packed and the
    claimed versions move (checked: this test fails with ``RESET (fillfactor)``)."""
    with pg_engine.connect() as conn:
        assert conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = "
                                 "'rocketbox_transaction'")).scalar() == ["fillfactor=40"]
    ids = _publish(pg_engine, 120)
    before = _blocks(pg_engine, ids)
    assert len(set(before.values())) > 2  # the rows fill several pages
    # a worker's lane name, as long as the relay's own (host:pid:listener-N)
    claimed = claim(_outbox(pg_engine), f"{worker_id()}:listener-1", 40)
    assert len(claimed) == 40
    after = _blocks(pg_engine, [row.tx_id for row in claimed])
    moved = {tx_id: (before[tx_id], page) for tx_id, page in after.items()
             if page != before[tx_id]}
    assert not moved, f"claimed versions written to another page: {moved}"


@pytest.mark.timeout(60)
def test_the_claim_is_planned_for_its_own_values_every_time(pg_engine: Engine) -> None:
    """psycopg prepares a statement a connection ran five times, and PostgreSQL may then
    run it with one generic plan; the claim's got slower with each row relayed (a fresh
    table: 0.61 ms after 2,000 rows, 1.44 ms after 12,000; docs/outbox.md). The claim asks
    for a plan made for its own timestamps each time: the connection's prepared claim
    has only custom plans (fails without ``plan_cache_mode = force_custom_plan``)."""
    engine = create_engine(pg_engine.url, pool_size=1, max_overflow=0)  # one session
    try:
        outbox = _outbox(engine)
        for _ in range(12):
            _publish(engine, 1)
            assert len(claim(outbox, "planned", 5)) == 1
        with engine.connect() as conn:
            plans = conn.execute(text(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE 'UPDATE rocketbox_transaction SET claimed_by%'")).all()
    finally:
        engine.dispose()
    assert len(plans) == 1, plans  # psycopg prepared it
    generic, custom = plans[0]
    assert generic == 0 and custom >= 6, plans
