"""Seed an outbox database for the status, replay, retention and metrics tests.

Rows are written the way an application writes them (``outbox.publish``
inside a transaction); what the relay would have done to them afterwards is
then set with plain SQL updates.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, create_engine, insert, select, update

from outbox import migrate
from outbox.config import Outbox
from outbox.models import inbox_table
from outbox.models import transaction_table as t
from outbox.publish import publish
from tests.support import PostgresServer


@dataclass(frozen=True)
class OpsDb:
    """A migrated database: its URL (for the CLI), an engine and an Outbox on it."""

    url: str
    engine: Engine
    outbox: Outbox

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name


def open_ops_db(url: str) -> OpsDb:
    migrate.upgrade(url)
    engine = create_engine(url)
    return OpsDb(url=url, engine=engine, outbox=Outbox(engine=engine))


def private_pg_url(server: PostgresServer) -> str:
    return server.create_database(f"ops_{uuid.uuid4().hex[:12]}").url


def publish_rows(db: OpsDb, topic: str, count: int, *, group: str | None = None
                 ) -> list[str]:
    """``count`` committed rows on ``topic``, published in one transaction."""
    with db.engine.begin() as conn:
        return [publish(conn, topic, {"i": i}, outbox=db.outbox, message_group=group)
                for i in range(count)]


def set_rows(db: OpsDb, tx_ids: Sequence[str], **values: Any) -> None:
    with db.engine.begin() as conn:
        conn.execute(update(t).where(t.c.tx_id.in_(list(tx_ids))).values(**values))


def mark_relayed(db: OpsDb, tx_ids: Sequence[str], at: datetime) -> None:
    """As if relayed at ``at`` (written one second earlier)."""
    set_rows(db, tx_ids, relayed_at=at, created_at=at - timedelta(seconds=1),
             commit_offset=1, half_offset=0)


def mark_parked(db: OpsDb, tx_ids: Sequence[str], *, error: str = "broker said no",
                attempts: int = 10) -> None:
    set_rows(db, tx_ids, parked=True, attempts=attempts, last_error=error)


def add_inbox(db: OpsDb, group: str, count: int, processed_at: datetime) -> None:
    with db.engine.begin() as conn:
        conn.execute(insert(inbox_table), [
            {"consumer_group": group, "tx_id": uuid.uuid4().hex.upper(),
             "processed_at": processed_at} for _ in range(count)])


def row(db: OpsDb, tx_id: str) -> dict[str, Any]:
    with db.engine.connect() as conn:
        return dict(conn.execute(select(t).where(t.c.tx_id == tx_id)).mappings().one())


def tx_ids(db: OpsDb) -> set[str]:
    with db.engine.connect() as conn:
        return set(conn.execute(select(t.c.tx_id)).scalars())


def inbox_count(db: OpsDb) -> int:
    with db.engine.connect() as conn:
        return len(conn.execute(select(inbox_table.c.tx_id)).all())
