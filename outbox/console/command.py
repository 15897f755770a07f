"""``rocketbox console``: build the settings from the command line and serve until a signal.

Once listening it prints one line on stdout, ``rocketbox console ready
url=http://HOST:PORT``, with the port actually bound (``--port 0`` picks one).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from outbox.cli_commands import CommandError, stop_on_signals
from outbox.console.config import ConsoleConfig, ConsoleConfigError
from outbox.console.server import ConsoleThread

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("console")
    where.add_argument("--host", default="127.0.0.1",
                       help="address to listen on; anything but loopback needs --token or the "
                            "ACL keys")
    where.add_argument("--port", type=int, default=8080, help="port (0 picks a free one)")
    # the default is read in config_from, not here, so that --help never prints a secret
    where.add_argument("--token", default=None,
                       help="password every request must carry (HTTP Basic, any user name; or "
                            "Authorization: Bearer); default: $ROCKETBOX_CONSOLE_TOKEN")
    where.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       dest="allowed_hosts",
                       help="a host name browsers may reach the console by, besides the "
                            "--host address and localhost (repeatable); any other Host header "
                            "is refused (DNS rebinding)")
    where.add_argument("--inbox-db", action="append", default=[], metavar="NAME=URL",
                       dest="inbox_dbs", type=_inbox_db,
                       help="another database holding inbox rows (a consumer service's own), "
                            "searched by the trace; repeatable")
    where.add_argument("--sample-seconds", type=float, default=5.0, metavar="S",
                       help="how often the overview's numbers are read (once for all viewers)")
    where.add_argument("--audit-json", type=Path, metavar="FILE",
                       help="the last `rocketbox audit --json FILE` report, for the audit page")
    where.add_argument("--audit-html", type=Path, metavar="FILE",
                       help="the last `rocketbox audit --html FILE` report, linked from it")
    where.add_argument("--audit-out", type=Path, metavar="DIR",
                       help="the last `rocketbox audit --out DIR` Parquet of divergent rows")


def _inbox_db(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name.strip() or "://" not in url:
        raise argparse.ArgumentTypeError(
            f"expected NAME=URL (e.g. billing=postgresql+psycopg://app@db/billing), got "
            f"{text.split('://')[0]!r}...")
    return name.strip(), url.strip()


def config_from(args: argparse.Namespace) -> ConsoleConfig:
    try:
        return ConsoleConfig(
            broker=args.broker, db_url=args.db, host=args.host, port=args.port,
            token=args.token or os.environ.get("ROCKETBOX_CONSOLE_TOKEN") or None,
            allowed_hosts=tuple(args.allowed_hosts), inbox_dbs=tuple(args.inbox_dbs),
            access_key=args.access_key or None,
            secret_key=args.secret_key or None, sample_seconds=args.sample_seconds,
            audit_json=args.audit_json, audit_html=args.audit_html, audit_out=args.audit_out,
            producer_group=args.group)
    except ConsoleConfigError as exc:
        raise CommandError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    with stop_on_signals() as stop:
        try:
            console = ConsoleThread(config).start()
        except (OSError, RuntimeError) as exc:
            raise CommandError(f"cannot serve on {config.host}:{config.port}: {exc}",
                               code=1) from None
        print(f"rocketbox console ready url={console.url}", flush=True)
        try:
            stop.wait()
        finally:
            console.stop()
    return 0
