"""The admin's unmanaged ``OutboxMessage`` model: no database change."""

from __future__ import annotations

from django.db import migrations


def _fields() -> list[tuple[str, object]]:
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
