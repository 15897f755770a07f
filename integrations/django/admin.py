"""Admin pages for the outbox rows: filter by state, parked and topic; replay parked rows."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.http import HttpRequest

from integrations.django.conf import state
from integrations.django.models import OutboxMessage
from outbox.models import transaction_table


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("tx_id", "topic", "tag", "state", "attempts", "parked", "created_at",
                    "relayed_at")
    list_filter = ("state", "parked", "topic")
    search_fields = ("tx_id", "keys", "message_group")
    readonly_fields = tuple(column.name for column in transaction_table.columns)
    actions = ["replay"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

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
