"""rocketbox_broker_state: which relay process last reported the broker unreachable.

``rocketbox status`` shows who reported an outage and how old that report is,
so an alarm left by a relay that has since died is not taken for a live one
(docs/outbox.md, "rocketbox status"). Nullable: a mark written before this
revision has no reporter. A frozen copy of ``outbox/models.py``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28 05:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# plain ALTER TABLE, no batch mode, as 0004: SQLite adds and (3.35+) drops a column in place


def upgrade() -> None:
    op.add_column("rocketbox_broker_state",
                  sa.Column("reported_by", sa.String(length=255), nullable=True))


def downgrade() -> None:
    op.drop_column("rocketbox_broker_state", "reported_by")
