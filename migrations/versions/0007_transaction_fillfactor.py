"""rocketbox_transaction: room on each page for a row's claim (PostgreSQL ``fillfactor`` 40).

Every row is updated twice after its insert: the relay's claim
(``claimed_by``, ``claimed_until``), then its record (``relayed_at``). A
claim touches no indexed column, so PostgreSQL can make it a HOT update (the
new version on the same page, no index entry added), but only if the page
has room; at the default fillfactor of 100 inserts pack the pages full, the
new version goes to another page, and every one of the table's four indexes
gets an entry. Pages filled to 40% make the claims HOT (a claimed version is a
little longer than the row it replaces, its worker's name and lease added: at
50% a few still went to another page). The claim and mark statements, in a
tight loop with no broker (30,000 rows, batches of 500, median of 3), went
from 38,900 to 61,700 rows/s and PostgreSQL's CPU from 21.3 to 12.0 us a row
(docs/outbox.md, "Room for the claim"). The record changes ``relayed_at``,
which the partial indexes' predicates read, so it is never HOT.

``ALTER TABLE ... SET (fillfactor = 40)`` changes how new rows fill pages;
pages written before it stay as they are (``VACUUM FULL`` rewrites them, not
needed: their rows are mostly relayed). SQLite has no fillfactor: nothing
happens there. The model (``outbox/models.py``) says the same, so
``create_all`` and this revision agree.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28 17:55:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: a frozen copy of ``outbox.models.TRANSACTION_FILLFACTOR`` at this revision
FILLFACTOR = 40


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE rocketbox_transaction SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE rocketbox_transaction RESET (fillfactor)")
