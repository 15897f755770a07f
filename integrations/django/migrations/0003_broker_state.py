"""The ``rocketbox_broker_state`` table: rocketbox's Alembic migrations, up to head.

As ``0001_initial`` does, this runs :func:`outbox.migrate.upgrade` on the
migrating alias's connection (a database migrated before revision 0003 gets
the table; a new one already has it, and nothing happens); unapplying goes
back to revision 0002.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def upgrade(apps: Any, schema_editor: Any) -> None:
    from integrations.django.db import sqlalchemy_connection
    from outbox import migrate

    with sqlalchemy_connection(schema_editor.connection.alias) as conn:
        migrate.upgrade(conn)


def downgrade(apps: Any, schema_editor: Any) -> None:
    from integrations.django.db import sqlalchemy_connection
    from outbox import migrate

    with sqlalchemy_connection(schema_editor.connection.alias) as conn:
        migrate.downgrade(conn, "0002")


class Migration(migrations.Migration):
    dependencies = [("rocketbox", "0002_outboxmessage")]
    operations = [migrations.RunPython(upgrade, downgrade)]
