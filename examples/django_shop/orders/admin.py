"""The orders in the admin, next to the outbox rows (``integrations.django.admin``)."""

from __future__ import annotations

from django.contrib import admin

from examples.django_shop.orders.models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("ref", "item", "qty", "created_at")
    search_fields = ("ref",)
