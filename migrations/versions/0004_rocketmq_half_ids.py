"""rocketbox_transaction: the RocketMQ half's message id and transaction id.

The RocketMQ 5 target records the ids of the half it stored for a row before
it sends the end, so a check-back commits only that half and rolls back any
other half carrying the same ``tx_id`` (docs/rocketmq.md). Both nullable:
broker_lite rows never have them. A frozen copy of ``outbox/models.py``.
``rocketbox_publish()`` (0002) names its columns and leaves these NULL, so it
is not replaced.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# plain ALTER TABLE, no batch mode: SQLite adds and (3.35+) drops a column in place, and
# offline SQL (``--sql``) needs no live database to reflect the table


def upgrade() -> None:
    op.add_column("rocketbox_transaction",
                  sa.Column("half_message_id", sa.String(length=128), nullable=True))
    op.add_column("rocketbox_transaction",
                  sa.Column("half_transaction_id", sa.String(length=255), nullable=True))


def downgrade() -> None:
    op.drop_column("rocketbox_transaction", "half_transaction_id")
    op.drop_column("rocketbox_transaction", "half_message_id")
