"""``manage.py rocketbox_relay``: the Celery relay worker (with its sweeper lane)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from integrations.django.conf import state
from outbox.errors import ConfigurationError


class Command(BaseCommand):
    help = "Run the Celery relay worker with its sweeper lane (and the check-back responder)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument("--no-sweeper", dest="sweeper", action="store_false",
                            help="do not run the sweeper lane in this worker")
        parser.add_argument("--no-beat", dest="sweeper", action="store_false",
                            help=argparse.SUPPRESS)  # the old name of --no-sweeper
        parser.add_argument("--no-checker", dest="checker", action="store_false")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        from integrations.django.conf import startup_checks
        from outbox.celery import run_worker

        if options["concurrency"] < 1:
            raise CommandError(f"--concurrency must be >= 1, got {options['concurrency']}")
        try:
            current = state()
        except ConfigurationError as exc:
            raise CommandError(str(exc), returncode=2) from exc
        if not current.celery_broker:
            raise CommandError("ROCKETBOX['CELERY_BROKER'] is '': the relay worker needs a "
                               "Celery broker")
        try:
            startup_checks("relay", current.base_outbox)
        except ConfigurationError as exc:
            raise CommandError(str(exc), returncode=2) from None
        code = run_worker(current.base_outbox, celery_broker=current.celery_broker,
                          celery_backend=current.options["CELERY_BACKEND"],
                          concurrency=options["concurrency"], sweeper=options["sweeper"],
                          loglevel=options["loglevel"], checker=options["checker"],
                          settings=current.options["CELERY_SETTINGS"])
        if code:
            sys.exit(code)
