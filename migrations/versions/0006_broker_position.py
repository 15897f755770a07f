"""rocketbox_transaction: where the broker put a relayed row, in the broker's words.

A target without a commit log the audit can decode (NATS JetStream, RabbitMQ)
hands back a position when it ends a row (``STREAM:SEQ``, ``QUEUE:N``); the
relay writes it here when it marks the row relayed, and the audit's broker
export carries the same string (docs/audit.md, "Broker export"). Nullable:
broker_lite and RocketMQ rows keep their offsets and ids in the older columns
and leave it NULL. A frozen copy of ``outbox/models.py``.
``rocketbox_publish()`` (0002) names its columns and leaves this NULL, so it is
not replaced.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28 07:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# plain ALTER TABLE, no batch mode, as 0004 and 0005: SQLite adds and (3.35+) drops a column
# in place


def upgrade() -> None:
    op.add_column("rocketbox_transaction",
                  sa.Column("broker_position", sa.String(length=255), nullable=True))


def downgrade() -> None:
    op.drop_column("rocketbox_transaction", "broker_position")
