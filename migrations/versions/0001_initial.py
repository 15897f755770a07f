"""The outbox tables: rocketbox_transaction, rocketbox_inbox, and the commit-order sequence.

A frozen copy of what ``outbox/models.py`` declared when this revision was
written (migrations never import the models: later model changes get their
own revision). ``alembic check`` proves the two still agree.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: ``publish()`` takes ``seq`` from this on PostgreSQL (SQLite uses max(seq) + 1)
SEQUENCE = "rocketbox_transaction_seq"
PENDING = "relayed_at IS NULL AND NOT parked"
UNRELAYED = "relayed_at IS NULL"


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    if _is_postgresql():
        op.execute(sa.schema.CreateSequence(sa.Sequence(SEQUENCE)))
    op.create_table(
        "rocketbox_transaction",
        sa.Column("tx_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("producer_group", sa.String(length=255), nullable=False),
        sa.Column("topic", sa.String(length=127), nullable=False),
        sa.Column("tag", sa.String(length=255), nullable=True),
        sa.Column("keys", sa.String(length=1024), nullable=True),
        sa.Column("message_group", sa.String(length=255), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=True),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("pg_xid", sa.BigInteger(), nullable=True),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("claimed_by", sa.String(length=255), nullable=True),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("half_offset", sa.BigInteger(), nullable=True),
        sa.Column("commit_offset", sa.BigInteger(), nullable=True),
        sa.Column("relayed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("parked", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.PrimaryKeyConstraint("tx_id", name=op.f("pk_rocketbox_transaction")),
    )
    op.create_index("ix_rocketbox_transaction_pending", "rocketbox_transaction",
                    ["next_attempt_at"], unique=False,
                    postgresql_where=sa.text(PENDING), sqlite_where=sa.text(PENDING))
    op.create_index("ix_rocketbox_transaction_group_seq", "rocketbox_transaction",
                    ["message_group", "seq"], unique=False,
                    postgresql_where=sa.text(UNRELAYED), sqlite_where=sa.text(UNRELAYED))
    op.create_index("ix_rocketbox_transaction_created_at", "rocketbox_transaction",
                    ["created_at"], unique=False)
    op.create_table(
        "rocketbox_inbox",
        sa.Column("consumer_group", sa.String(length=255), nullable=False),
        sa.Column("tx_id", sa.String(length=64), nullable=False),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("consumer_group", "tx_id", name=op.f("pk_rocketbox_inbox")),
    )
    op.create_index("ix_rocketbox_inbox_processed_at", "rocketbox_inbox", ["processed_at"],
                    unique=False)


def downgrade() -> None:
    op.drop_index("ix_rocketbox_inbox_processed_at", table_name="rocketbox_inbox")
    op.drop_table("rocketbox_inbox")
    op.drop_index("ix_rocketbox_transaction_created_at", table_name="rocketbox_transaction")
    op.drop_index("ix_rocketbox_transaction_group_seq", table_name="rocketbox_transaction")
    op.drop_index("ix_rocketbox_transaction_pending", table_name="rocketbox_transaction")
    op.drop_table("rocketbox_transaction")
    if _is_postgresql():
        op.execute(sa.schema.DropSequence(sa.Sequence(SEQUENCE)))
