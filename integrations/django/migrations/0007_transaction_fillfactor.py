"""Room on each page of ``rocketbox_transaction`` for a row's claim (PostgreSQL
``fillfactor`` 40): rocketbox's Alembic migrations, to head.

Applying runs what ``0001_initial`` runs, :func:`outbox.migrate.upgrade` to
head (a database migrated before revision 0007 gets the storage parameter; a
new one already has it, and nothing happens); unapplying goes back to 0006.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.db import migrations

#: applying is the same as 0003's: 0001_initial's upgrade to head
upgrade = importlib.import_module("integrations.django.migrations.0003_broker_state").upgrade


def downgrade(apps: Any, schema_editor: Any) -> None:
    from integrations.django.db import alembic_downgrade

    alembic_downgrade(schema_editor, "0006")


class Migration(migrations.Migration):
    dependencies = [("rocketbox", "0006_broker_position")]
    operations = [migrations.RunPython(upgrade, downgrade)]
