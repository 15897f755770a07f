"""The outbox tables (SQLAlchemy 2.0, typed). One source of truth for Alembic and Django.

``rocketbox_transaction`` holds one row per unit of work that published: the
message to relay, the state the check-back answers with, and the relay's own
bookkeeping. ``rocketbox_inbox`` holds one row per (consumer group, tx_id) a
consumer has processed, written in the handler's own transaction.
``rocketbox_broker_state`` holds one row per broker address the relay could
not reach: since when, and the last error (``rocketbox status`` shows it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "NAMING_CONVENTION",
    "STATES",
    "TRANSACTION_FILLFACTOR",
    "VERSION_TABLE",
    "Base",
    "BrokerStateRow",
    "InboxRow",
    "TransactionRow",
    "aware",
    "broker_state_table",
    "inbox_table",
    "metadata",
    "transaction_table",
]

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: rocketbox's own Alembic version table: an application's ``alembic_version``
#: in the same database is never touched
VERSION_TABLE = "rocketbox_alembic_version"

#: PostgreSQL's fillfactor of ``rocketbox_transaction`` (revision 0007): inserts leave half
#: of each page free, so the relay's claim of a row is a HOT update on the row's own page
TRANSACTION_FILLFACTOR = 40

#: what a status row can say about its unit of work (RocketMQ's three answers)
STATES = ("COMMIT", "ROLLBACK", "UNKNOWN")


class Base(DeclarativeBase):
    metadata = metadata


class TransactionRow(Base):
    """A unit of work's message and the state the broker's check-back gets."""

    __tablename__ = "rocketbox_transaction"

    tx_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    #: commit order: per message group, rows are relayed in this order
    seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    producer_group: Mapped[str] = mapped_column(String(255), nullable=False)
    topic: Mapped[str] = mapped_column(String(127), nullable=False)
    tag: Mapped[str | None] = mapped_column(String(255))
    keys: Mapped[str | None] = mapped_column(String(1024))
    message_group: Mapped[str | None] = mapped_column(String(255))
    body: Mapped[bytes] = mapped_column(LargeBinary, nullable=False)
    headers: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(8), nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    #: PostgreSQL: the writing transaction's id, for pg_xact_status in check-back
    pg_xid: Mapped[int | None] = mapped_column(BigInteger)
    # -- relay bookkeeping --------------------------------------------------------
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    last_error: Mapped[str | None] = mapped_column(Text)
    claimed_by: Mapped[str | None] = mapped_column(String(255))
    claimed_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    half_offset: Mapped[int | None] = mapped_column(BigInteger)
    commit_offset: Mapped[int | None] = mapped_column(BigInteger)
    relayed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    parked: Mapped[bool] = mapped_column(Boolean, nullable=False, server_default=false())
    #: RocketMQ 5: the stored half's message id and transaction id, written before its end
    #: is sent; a check-back commits only that half (docs/rocketmq.md)
    half_message_id: Mapped[str | None] = mapped_column(String(128))
    half_transaction_id: Mapped[str | None] = mapped_column(String(255))
    #: where the broker put the relayed message, in its own words (``STREAM:SEQ`` on
    #: JetStream): a target without a commit log hands it back (revision 0006;
    #: broker_lite and RocketMQ leave it NULL, their offsets are in the columns above)
    broker_position: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (
        # "next pending rows" stays cheap at millions of rows: only unrelayed,
        # unparked rows are in this index.
        Index("ix_rocketbox_transaction_pending", "next_attempt_at",
              postgresql_where=text("relayed_at IS NULL AND NOT parked"),
              sqlite_where=text("relayed_at IS NULL AND NOT parked")),
        Index("ix_rocketbox_transaction_group_seq", "message_group", "seq",
              postgresql_where=text("relayed_at IS NULL"),
              sqlite_where=text("relayed_at IS NULL")),
        Index("ix_rocketbox_transaction_created_at", "created_at"),
        # half-full pages: a claim (no indexed column changed) stays on its page, a HOT
        # update with no index entry (migration 0007)
        {"postgresql_with": {"fillfactor": TRANSACTION_FILLFACTOR}},
    )


class InboxRow(Base):
    """A message a consumer group has processed (its dedupe record)."""

    __tablename__ = "rocketbox_inbox"

    consumer_group: Mapped[str] = mapped_column(String(255), nullable=False)
    tx_id: Mapped[str] = mapped_column(String(64), nullable=False)
    processed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    __table_args__ = (
        PrimaryKeyConstraint("consumer_group", "tx_id"),
        Index("ix_rocketbox_inbox_processed_at", "processed_at"),
    )


class BrokerStateRow(Base):
    """Whether the relay reaches a broker: ``unreachable_since`` is set while it does not."""

    __tablename__ = "rocketbox_broker_state"

    broker: Mapped[str] = mapped_column(String(255), primary_key=True)
    unreachable_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    #: the relay process that last reported it unreachable (``HOST pid N``; revision 0005)
    reported_by: Mapped[str | None] = mapped_column(String(255))


transaction_table = cast(Table, TransactionRow.__table__)
broker_state_table = cast(Table, BrokerStateRow.__table__)
inbox_table = cast(Table, InboxRow.__table__)


def aware(value: datetime) -> datetime:
    """A datetime read from these tables, as UTC: SQLite hands back naive ones, and
    rocketbox always writes UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
