"""rocketbox_publish(): the outbox INSERT as a function, so a row can ride on the COMMIT.

PostgreSQL only (SQLite gets nothing). ``outbox/at_commit.py`` calls it in
the same query as the transaction's ``COMMIT``; the body below does what
``outbox.publish.publish`` does on PostgreSQL: the message group's advisory
lock (same key), ``seq`` from the sequence after the lock, and the writing
transaction's id. A frozen copy, like every revision: a later change of the
table that the function must follow gets its own revision.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SIGNATURE = ("rocketbox_publish(p_tx_id text, p_producer_group text, p_topic text, "
             "p_tag text, p_keys text, p_message_group text, p_body bytea, p_headers json, "
             "p_state text, p_created_at timestamptz)")
BODY = """
BEGIN
    IF p_message_group IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('rocketbox:' || p_message_group));
    END IF;
    INSERT INTO rocketbox_transaction (tx_id, seq, producer_group, topic, tag, keys,
                                       message_group, body, headers, state, created_at,
                                       next_attempt_at, pg_xid)
    VALUES (p_tx_id, nextval('rocketbox_transaction_seq'), p_producer_group, p_topic, p_tag,
            p_keys, p_message_group, p_body, p_headers, p_state, p_created_at, p_created_at,
            pg_current_xact_id()::text::bigint);
END
"""


def _is_postgresql() -> bool:
    return op.get_context().dialect.name == "postgresql"


def upgrade() -> None:
    if _is_postgresql():
        op.execute(f"CREATE OR REPLACE FUNCTION {SIGNATURE} RETURNS void "
                   f"LANGUAGE plpgsql AS $rocketbox${BODY}$rocketbox$")


def downgrade() -> None:
    if _is_postgresql():
        op.execute("DROP FUNCTION IF EXISTS rocketbox_publish(text, text, text, text, text, "
                   "text, bytea, json, text, timestamptz)")
