"""rocketbox_broker_state: since when the relay cannot reach a broker.

The relay writes it when a pass cannot reach the broker at all (and clears
it once one gets through); ``rocketbox status`` shows "broker unreachable
since ...". A frozen copy of ``outbox/models.py``'s ``BrokerStateRow``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rocketbox_broker_state",
        sa.Column("broker", sa.String(length=255), nullable=False),
        sa.Column("unreachable_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("broker", name=op.f("pk_rocketbox_broker_state")),
    )


def downgrade() -> None:
    op.drop_table("rocketbox_broker_state")
