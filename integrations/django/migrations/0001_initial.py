"""The outbox tables, created by rocketbox's own Alembic migrations.

``manage.py migrate rocketbox`` runs :func:`outbox.migrate.upgrade` on the
migrating alias's connection, inside Django's migration transaction, so the
schema is exactly the Alembic one (``outbox/models.py`` stays the only
description of it); unapplying runs the downgrade to ``base``.
"""

from __future__ import annotations

from typing import Any, ClassVar

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
        migrate.downgrade(conn, "base")


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations = [migrations.RunPython(upgrade, downgrade)]
