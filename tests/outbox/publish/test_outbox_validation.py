"""``publish()`` refuses, inside the caller's transaction, what the broker would refuse.

Each refusal is an :class:`InvalidMessageError` naming the field (and the
limit where there is one); nothing is written and the caller's transaction
is still usable. A message right at the limits is taken by a real broker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from outbox import (
    ConfigurationError,
    InvalidMessageError,
    Outbox,
    publish,
)
from outbox.models import transaction_table as t
from outbox.validation import DEFAULT_MAX_BODY_SIZE, MAX_PROPERTIES_BYTES
from tests.support import PostgresServer, start_broker_lite
from tests.support.outbox_db import pg_outbox_database
from tests.support.publishers import drain
from tests.support.sqlite import sqlite_outbox_engine

MiB = 1 << 20


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = sqlite_outbox_engine(tmp_path / "outbox.sqlite")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE orders (id INTEGER PRIMARY KEY, ref TEXT)"))
    yield engine
    engine.dispose()


def _refused(engine: Engine, field: str, **message: Any) -> InvalidMessageError:
    """Publish in a transaction that also writes a business row; the row still commits."""
    outbox = Outbox(engine=engine)
    message.setdefault("topic", "Orders")
    message.setdefault("body", {"n": 1})
    with Session(engine) as session, session.begin():
        session.execute(text("INSERT INTO orders (ref) VALUES ('kept')"))
        with pytest.raises(InvalidMessageError) as caught:
            publish(session, message.pop("topic"), message.pop("body"), outbox=outbox,
                    **message)
        # the caller's transaction is intact: it goes on and commits its own rows
        session.execute(text("INSERT INTO orders (ref) VALUES ('after')"))
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(t)).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM orders")).scalar() == 2
        conn.execute(text("DELETE FROM orders"))
        conn.commit()
    assert caught.value.field == field
    assert str(caught.value).startswith(f"invalid {field}: ")
    return caught.value


@pytest.mark.timeout(30)
def test_a_body_over_the_limit_is_refused_naming_the_limit(engine: Engine) -> None:
    error = _refused(engine, "body", body=b"x" * (5 * MiB))
    assert error.limit == DEFAULT_MAX_BODY_SIZE == 4 * MiB
    assert f"{5 * MiB} bytes" in str(error) and str(4 * MiB) in str(error)
    assert "max_body_size" in str(error)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("topic", ["Orders.v1", "", "a" * 128, "orders created",
                                   "Ordérs", "RMQ_SYS_TRANS_HALF_TOPIC", "SCHEDULE_TOPIC_XXXX"])
def test_a_topic_the_broker_refuses_is_refused(engine: Engine, topic: str) -> None:
    error = _refused(engine, "topic", topic=topic)
    assert repr(topic) in str(error)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("field", "message", "limit"), [
    ("keys", {"keys": ["order-1", "with space"]}, None),
    ("keys", {"keys": ["order-1", ""]}, None),
    ("keys", {"keys": "x" * 1025}, 1024),
    ("keys", {"keys": "\ud800"}, None),
    ("tag", {"tag": "t" * 256}, 255),
    ("message_group", {"message_group": "g" * 256}, 255),
    ("headers", {"headers": {"trace": "a\x01b"}}, None),
    ("headers", {"headers": {"": "empty name"}}, None),
    ("headers", {"headers": {"big": "x" * MAX_PROPERTIES_BYTES}}, MAX_PROPERTIES_BYTES),
])
def test_keys_and_properties_the_broker_refuses_are_refused(
        engine: Engine, field: str, message: dict[str, Any], limit: int | None) -> None:
    error = _refused(engine, field, **message)
    assert error.limit == limit
    if limit is not None:
        assert f"over the limit of {limit}" in str(error)


@pytest.mark.timeout(30)
def test_max_body_size_is_a_setting(engine: Engine) -> None:
    with pytest.raises(ConfigurationError, match="max_body_size"):
        Outbox(engine=engine, max_body_size=0)
    outbox = Outbox(engine=engine, max_body_size=1000)
    with Session(engine) as session, session.begin(), \
            pytest.raises(InvalidMessageError, match="over the limit of 1000 bytes"):
        publish(session, "Orders", b"x" * 1001, outbox=outbox)


@pytest.mark.timeout(90)
def test_a_message_at_every_limit_is_taken_by_the_broker(postgres_server: PostgresServer,
                                                         tmp_path: Path) -> None:
    with pg_outbox_database(postgres_server, "rbval") as (engine, _url), \
            start_broker_lite(tmp_path / "broker") as broker:  # its default limits
        outbox = Outbox(engine=engine, broker=broker.native)
        headers = {"h": "x" * (MAX_PROPERTIES_BYTES - 200)}
        with Session(engine) as session, session.begin():
            ids = [publish(session, "T" * 127, b"x" * DEFAULT_MAX_BODY_SIZE, outbox=outbox),
                   publish(session, "Orders", {"n": 1}, outbox=outbox, headers=headers,
                           keys=["k1", "k2"], tag="created", message_group="g")]
        report = drain(outbox)
        assert report.relayed == 2, report.errors
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(t).where(
                t.c.tx_id.in_(ids), t.c.relayed_at.is_not(None))).scalar() == 2
