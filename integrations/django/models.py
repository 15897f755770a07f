"""``OutboxMessage``: the status table, read-only, for the admin.

The model is *unmanaged* and its fields are derived from
:data:`outbox.models.transaction_table`, so ``outbox/models.py`` stays the
only description of the schema (the table itself is created by the
``rocketbox`` app's migration, which runs the Alembic migrations).
"""

from __future__ import annotations

from typing import Any

from django.db import models
from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Integer, LargeBinary, String, Text
from sqlalchemy import Column as SAColumn

from outbox.models import transaction_table

__all__ = ["OutboxMessage", "django_field"]


def django_field(column: SAColumn[Any]) -> models.Field[Any, Any]:
    """The Django field that reads ``column`` (for display; Django never writes it)."""
    common: dict[str, Any] = {"null": bool(column.nullable) and not column.primary_key,
                              "primary_key": bool(column.primary_key)}
    kind = column.type
    field: models.Field[Any, Any]
    if isinstance(kind, Boolean):
        field = models.BooleanField(**common)
    elif isinstance(kind, BigInteger):
        field = models.BigIntegerField(**common)
    elif isinstance(kind, Integer):
        field = models.IntegerField(**common)
    elif isinstance(kind, DateTime):
        field = models.DateTimeField(**common)
    elif isinstance(kind, LargeBinary):
        field = models.BinaryField(**common)
    elif isinstance(kind, Text | JSON):  # JSON shown as its text
        field = models.TextField(**common)
    elif isinstance(kind, String):
        field = models.CharField(max_length=kind.length or 255, **common)
    else:
        raise TypeError(f"no Django field for {column.name}: {kind!r}")
    return field


def _attributes() -> dict[str, Any]:
    attrs: dict[str, Any] = {"__module__": __name__}
    for column in transaction_table.columns:
        attrs[column.name] = django_field(column)
    attrs["Meta"] = type("Meta", (), {
        "managed": False, "db_table": transaction_table.name, "ordering": ["-seq"],
        "verbose_name": "outbox message", "app_label": "rocketbox"})
    attrs["__str__"] = lambda self: f"{self.topic} {self.tx_id}"
    return attrs


OutboxMessage = type("OutboxMessage", (models.Model,), _attributes())
