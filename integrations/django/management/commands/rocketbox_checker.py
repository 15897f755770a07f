"""``manage.py rocketbox_checker``: answer the broker's check-backs from the status table."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from integrations.django.conf import state
from outbox.errors import ConfigurationError


class Command(BaseCommand):
    help = "Answer the broker's check-backs for orphaned halves, until SIGTERM."

    def handle(self, *args: Any, **options: Any) -> None:
        from integrations.django.conf import startup_checks
        from outbox.checkback_runner import run_checker

        try:
            outbox = state().base_outbox
        except ConfigurationError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        if int(options.get("verbosity", 1)) > 1:
            logging.basicConfig(level=logging.INFO)

        def ready() -> None:
            self.stdout.write(f"rocketbox checker ready group={outbox.producer_group} "
                              f"broker={outbox.broker_display}")
            self.stdout.flush()

        try:
            startup_checks("checker", outbox)
        except ConfigurationError as exc:
            raise CommandError(str(exc), returncode=2) from None
        run_checker(outbox, on_ready=ready)
