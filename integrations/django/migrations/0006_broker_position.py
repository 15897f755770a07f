"""Where the broker put a relayed row (``rocketbox_transaction.broker_position``):
rocketbox's Alembic migrations, to head.

Applying runs what ``0001_initial`` runs, :func:`outbox.migrate.upgrade` to
head (a database migrated before revision 0006 gets the column; a new one
already has it, and nothing happens); unapplying goes back to 0005.
"""

from __future__ import annotations

import importlib
from typing import Any

from django.db import migrations

#: applying is the same as 0003's: 0001_initial's upgrade to head
upgrade = importlib.import_module("integrations.django.migrations.0003_broker_state").upgrade


def downgrade(apps: Any, schema_editor: Any) -> None:
    from integrations.django.db import alembic_downgrade

    alembic_downgrade(schema_editor, "0005")


class Migration(migrations.Migration):
    dependencies = [("rocketbox", "0005_broker_state_reporter")]
    operations = [migrations.RunPython(upgrade, downgrade)]
