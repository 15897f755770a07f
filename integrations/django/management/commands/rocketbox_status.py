"""``manage.py rocketbox_status``: backlog, oldest pending row, parked rows."""

from __future__ import annotations

import json
from typing import IO, Any, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from sqlalchemy import inspect
from sqlalchemy.exc import DBAPIError

from integrations.django.conf import state
from outbox.errors import ConfigurationError
from outbox.models import transaction_table


class Command(BaseCommand):
    help = "Show the outbox's backlog per topic and its parked rows."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument("--parked-limit", type=int, default=20)

    def handle(self, *args: Any, **options: Any) -> None:
        from outbox.status import read_status
        from outbox.status_render import render_status

        if options["parked_limit"] < 0:
            raise CommandError(f"--parked-limit must be >= 0, got {options['parked_limit']}")
        try:
            engine = state().base_outbox.engine
            if not inspect(engine).has_table(transaction_table.name):
                raise CommandError("no rocketbox tables: run `manage.py migrate rocketbox`")
            result = read_status(engine, parked_limit=options["parked_limit"])
        except (ConfigurationError, DBAPIError) as exc:
            raise CommandError(str(exc).splitlines()[0]) from exc
        if options["json"]:
            self.stdout.write(json.dumps(result.to_json(), indent=2))
        else:
            render_status(result, Console(file=cast(IO[str], self.stdout)))
