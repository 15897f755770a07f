"""Admin pages for the outbox rows: what is pending and why, the body as text; replay parked rows.

The changelist shows each row's attempts, how long it has been pending and
its ``last_error``; a *delivery* filter picks pending, parked or relayed
rows. The change view shows the body as pretty JSON when it is JSON, as
text when it is UTF-8, and as hex otherwise (never a Python ``bytes``
literal). Rows are read-only: the outbox owns them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from integrations.django.conf import state
from integrations.django.models import OutboxMessage
from outbox.models import transaction_table

__all__ = ["DeliveryFilter", "OutboxMessageAdmin", "body_text", "pending_age"]

#: characters of ``last_error`` the changelist shows (the change view has it whole)
ERROR_COLUMN_WIDTH = 80


def body_text(body: bytes | memoryview | None) -> str:
    """The body for people: indented JSON, else UTF-8 text, else hex."""
    if body is None:
        return ""
    raw = bytes(body)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.hex(" ")
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


def pending_age(created_at: datetime | None, relayed_at: datetime | None,
                now: datetime | None = None) -> str:
    """How long a row not yet relayed has waited since its commit, e.g. ``3m 05s``; else ``""``."""
    if relayed_at is not None or created_at is None:
        return ""
    if created_at.tzinfo is None:
        created_at = created_at.replace(tzinfo=UTC)  # the outbox writes UTC
    age = max(timedelta(0), (now or datetime.now(UTC)) - created_at)
    seconds = int(age.total_seconds())
    days, seconds = divmod(seconds, 86_400)
    hours, seconds = divmod(seconds, 3_600)
    minutes, seconds = divmod(seconds, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


class DeliveryFilter(admin.SimpleListFilter):
    """Pending (waiting for the relay), parked (waiting for a replay) or relayed."""

    title = "delivery"
    parameter_name = "delivery"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("pending", "pending"), ("parked", "parked"), ("relayed", "relayed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "pending":
            return queryset.filter(relayed_at__isnull=True, parked=False)
        if value == "parked":
            return queryset.filter(relayed_at__isnull=True, parked=True)
        if value == "relayed":
            return queryset.filter(relayed_at__isnull=False)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("tx_id", "topic", "tag", "state", "attempts", "pending_for", "error",
                    "parked", "created_at", "relayed_at")
    list_filter = (DeliveryFilter, "state", "parked", "topic")
    search_fields = ("tx_id", "keys", "message_group")
    readonly_fields = tuple("message_body" if column.name == "body" else column.name
                            for column in transaction_table.columns)
    fields = readonly_fields
    actions = ["replay"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="pending for")
    def pending_for(self, obj: Any) -> str:
        return pending_age(obj.created_at, obj.relayed_at)

    @admin.display(description="last error")
    def error(self, obj: Any) -> str:
        text = str(obj.last_error or "")
        if len(text) <= ERROR_COLUMN_WIDTH:
            return text
        return text[:ERROR_COLUMN_WIDTH - 1] + "…"

    @admin.display(description="body")
    def message_body(self, obj: Any) -> str:
        return format_html('<pre class="rocketbox-body">{}</pre>', body_text(obj.body))

    @admin.action(description="Replay the selected parked rows")
    def replay(self, request: HttpRequest, queryset: Any) -> None:
        from outbox.replay import replay

        ids = [str(tx_id) for tx_id in queryset.values_list("tx_id", flat=True)]
        result = replay(state().base_outbox.engine, ids)
        self.message_user(request, f"replayed {len(result.replayed)} parked row(s)",
                          messages.SUCCESS)
        skipped = len(result.not_parked) + len(result.already_relayed) + len(result.unknown)
        if skipped:
            self.message_user(request, f"{skipped} row(s) were not parked and were left alone",
                              messages.WARNING)
