"""The admin's unmanaged ``OutboxMessage`` model: no database change."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def _fields() -> list[tuple[str, models.Field[Any, Any]]]:
    from integrations.django.models import django_field
    from outbox.models import transaction_table

    return [(column.name, django_field(column)) for column in transaction_table.columns]


class Migration(migrations.Migration):
    dependencies = [("rocketbox", "0001_initial")]
    operations = [
        migrations.CreateModel(
            name="OutboxMessage", fields=_fields(),
            options={"managed": False, "db_table": "rocketbox_transaction",
                     "ordering": ["-seq"], "verbose_name": "outbox message"},
        ),
    ]
