"""``publish()`` on a Core ``Connection`` calls ``Outbox.on_commit`` after the commit.

As for an ORM Session: once per committed transaction, with that
transaction's ids, never for a rolled-back one, and only once the rows are
visible to another connection (a relay task enqueued earlier could find
nothing). Real PostgreSQL, migrated (so ``at_commit`` rides on the COMMIT).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence

import pytest
from sqlalchemy import Engine, create_engine, select, text

from outbox import Outbox, migrate, publish
from outbox.models import transaction_table as t
from outbox.sqla_core_commit import OPT_OUT
from tests.support import PostgresServer


class Hook:
    """Records each call's ids and whether another connection saw those rows then."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: list[list[str]] = []
        self.visible: list[bool] = []

    def __call__(self, ids: Sequence[str]) -> None:
        with self.engine.connect() as conn:  # a connection of its own
            seen = set(conn.execute(select(t.c.tx_id).where(t.c.tx_id.in_(ids))).scalars())
        self.calls.append(list(ids))
        self.visible.append(seen == set(ids))


@pytest.fixture
def engine(postgres_server: PostgresServer) -> Iterator[Engine]:
    db = postgres_server.create_database(f"rbcore_{uuid.uuid4().hex[:12]}")
    engine = create_engine(db.url, pool_size=3)
    migrate.upgrade(engine, "head")
    yield engine
    engine.dispose()


def _outbox(engine: Engine) -> tuple[Outbox, Hook]:
    hook = Hook(engine)
    return dataclasses.replace(Outbox(engine=engine), on_commit=hook), hook


@pytest.mark.timeout(60)
def test_engine_begin_calls_the_hook_after_the_commit(engine: Engine) -> None:
    outbox, hook = _outbox(engine)
    with engine.begin() as conn:
        first = publish(conn, "Orders", {"n": 1}, outbox=outbox)
        last = publish(conn, "Orders", {"n": 2}, outbox=outbox, at_commit=True)
        assert hook.calls == []
    assert hook.calls == [[first, last]]
    assert hook.visible == [True]


@pytest.mark.timeout(60)
def test_a_rolled_back_transaction_calls_no_hook(engine: Engine) -> None:
    outbox, hook = _outbox(engine)
    with pytest.raises(RuntimeError), engine.begin() as conn:
        publish(conn, "Orders", {"n": 1}, outbox=outbox)
        raise RuntimeError("the view failed")
    with engine.connect() as conn:
        conn.begin()
        publish(conn, "Orders", {"n": 2}, outbox=outbox, at_commit=True)
        conn.rollback()
    with engine.begin() as conn:
        kept = publish(conn, "Orders", {"n": 3}, outbox=outbox)
    assert hook.calls == [[kept]] and hook.visible == [True]


@pytest.mark.timeout(60)
def test_commit_as_you_go_hands_each_transaction_its_own_ids(engine: Engine) -> None:
    outbox, hook = _outbox(engine)
    with engine.connect() as conn:
        conn.begin()
        one = publish_in(conn, outbox, 2)
        conn.commit()
        conn.begin()  # the next transaction begins: the first one is over
        assert hook.calls == [one]
        two = publish_in(conn, outbox, 1)
        conn.rollback()
        conn.begin()
        three = publish_in(conn, outbox, 1)
        conn.commit()
    assert hook.calls == [one, three]
    assert hook.visible == [True, True]
    with engine.connect() as conn:
        assert conn.execute(select(t.c.tx_id).where(t.c.tx_id.in_(two))).first() is None


@pytest.mark.timeout(60)
def test_a_caller_that_calls_the_hook_itself_opts_out(engine: Engine) -> None:
    outbox, hook = _outbox(engine)
    with engine.begin() as conn:
        conn.execution_options(**{OPT_OUT: False})
        publish(conn, "Orders", {"n": 1}, outbox=outbox)
    with engine.begin() as conn:  # the same pooled connection: the option did not stick
        kept = publish(conn, "Orders", {"n": 2}, outbox=outbox)
    assert hook.calls == [[kept]]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM rocketbox_transaction")).scalar() == 2


def publish_in(conn: object, outbox: Outbox, count: int) -> list[str]:
    from sqlalchemy import Connection

    assert isinstance(conn, Connection)
    return [publish(conn, "Orders", {"n": i}, outbox=outbox) for i in range(count)]
