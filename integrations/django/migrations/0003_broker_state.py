"""The ``rocketbox_broker_state`` table: rocketbox's Alembic migrations, up to head.

Applying runs what ``0001_initial`` runs, :func:`outbox.migrate.upgrade` to
head (a database migrated before revision 0003 gets the table; a new one
already has it, and nothing happens); unapplying goes back to revision 0002.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.db import migrations


def upgrade(apps: Any, schema_editor: Any) -> None:
    initial = importlib.import_module("integrations.django.migrations.0001_initial")
    initial.upgrade(apps, schema_editor)


def downgrade(apps: Any, schema_editor: Any) -> None:
    from integrations.django.db import alembic_downgrade

    alembic_downgrade(schema_editor, "0002")


class Migration(migrations.Migration):
    dependencies = [("rocketbox", "0002_outboxmessage")]
    operations = [migrations.RunPython(upgrade, downgrade)]
