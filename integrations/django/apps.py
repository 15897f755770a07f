"""The Django app (label ``rocketbox``): settings are checked and wired in ``ready()``."""

from __future__ import annotations

from django.apps import AppConfig


class RocketboxConfig(AppConfig):
    name = "integrations.django"
    label = "rocketbox"
    verbose_name = "rocketbox outbox"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from integrations.django import checks
        from integrations.django.db import tune_sqlite_connection

        checks.register()
        connection_created.connect(tune_sqlite_connection, dispatch_uid="rocketbox-sqlite")
