"""``broker-lite serve --console-port``: the operations console next to a broker alone.

The console lives in :mod:`outbox.console` (the ``console`` extra); this edge
imports it only when asked, so a broker without the extra runs as before.
Without a database the console shows the broker's pages (topics, consumer
groups, lookup and traces from the broker's records, transactions, dead
letters). It connects to the broker's native door like any admin client, so
it starts on its own thread once the broker listens, and logs
``console listening on http://HOST:PORT`` on stderr (stdout keeps its one
ready line).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
from typing import Any

__all__ = ["add_arguments", "console_config", "start_console"]

log = logging.getLogger("broker_lite.server")


def add_arguments(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("operations console (needs: pip install 'rocketbox[console]')")
    group.add_argument("--console-port", type=int, default=None, metavar="PORT",
                       help="serve the web console on this port (0 picks one); off if unset")
    group.add_argument("--console-host", default="127.0.0.1", metavar="HOST",
                       help="the console's address (default: 127.0.0.1); anything else needs "
                            "--console-token or the console's ACL keys")
    group.add_argument("--console-token", default=os.environ.get("BROKER_LITE_CONSOLE_TOKEN"),
                       metavar="TOKEN",
                       help="password every console request must carry (HTTP Basic, any user "
                            "name); env BROKER_LITE_CONSOLE_TOKEN")
    group.add_argument("--console-access-key", default=None, metavar="KEY",
                       help="with --acl: an admin account the console connects as (its keys "
                            "also log in to the console)")
    group.add_argument("--console-secret-key",
                       default=os.environ.get("BROKER_LITE_CONSOLE_SECRET_KEY"), metavar="KEY",
                       help="that account's secret key (env BROKER_LITE_CONSOLE_SECRET_KEY)")


def console_config(args: argparse.Namespace, broker: str) -> Any:
    """The console's settings, or ``None`` without ``--console-port``; ``ValueError`` (with
    the setting named) or ``ImportError`` (no console extra) when it cannot run."""
    if args.console_port is None:
        return None
    from outbox.console import ConsoleConfig

    return ConsoleConfig(broker=broker, host=args.console_host, port=args.console_port,
                         token=args.console_token or None,
                         access_key=args.console_access_key or None,
                         secret_key=args.console_secret_key or None)


def start_console(config: Any, native: str) -> None:
    """Start the console on a thread (it connects to ``native``, which must be listening)."""
    from dataclasses import replace

    from outbox.console import ConsoleThread

    def run() -> None:
        try:
            console = ConsoleThread(replace(config, broker=native)).start()
        except Exception:
            log.exception("the console did not start")
            return
        log.info("console listening on %s", console.url)

    threading.Thread(target=run, name="broker-lite-console-start", daemon=True).start()
