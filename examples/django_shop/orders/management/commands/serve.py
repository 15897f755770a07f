"""``manage.py serve [--port 0]``: werkzeug's threaded server; prints ``shop ready URL``."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any

from django.core.handlers.wsgi import WSGIHandler
from django.core.management.base import BaseCommand, CommandParser
from werkzeug.serving import make_server


class Command(BaseCommand):
    help = "Serve the shop over HTTP until SIGTERM."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)

    def handle(self, *args: Any, **options: Any) -> None:
        server = make_server(options["host"], options["port"], WSGIHandler(), threaded=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.stdout.write(f"shop ready http://{options['host']}:{server.server_port}")
        self.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        server.shutdown()
