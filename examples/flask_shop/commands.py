"""What the Flask and FastAPI shops' ``run`` modules share: their commands and the checker.

Both shops run the same parts (``migrate``, ``web``, ``relay``, ``checker``,
``inventory``); :func:`shop_parser` declares them once and each ``run``
module adds its own options; :func:`run_part` runs the one the command line
names, each ``run`` module giving its own parts. :func:`serve_checker` is the
``checker`` part.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Mapping

from outbox import Outbox
from outbox.errors import ConfigurationError
from outbox.targets.address import parse_broker_address

__all__ = ["COMMANDS", "Part", "check_start", "run_part", "serve_checker", "shop_broker",
           "shop_parser"]

#: the parts a shop's ``run`` starts, in the order ``--help`` lists them
COMMANDS = ("migrate", "web", "relay", "checker", "inventory")
#: one part of a shop: its parsed command line in, the exit status out
Part = Callable[[argparse.Namespace], int]


def shop_parser(prog: str) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """``prog``'s parser with one sub-command per part (``web`` with ``--host``, ``--port``),
    and those sub-commands' parsers by name, for the options only one shop has."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {name: sub.add_parser(name) for name in COMMANDS}
    commands["web"].add_argument("--host", default="127.0.0.1")
    commands["web"].add_argument("--port", type=int, default=8000)
    return parser, commands


def run_part(prog: str, args: argparse.Namespace, parts: Mapping[str, Part]) -> int:
    """Run the part ``args.command`` names (one of :data:`COMMANDS`, each a key of
    ``parts``); a setting the shop cannot start with
    (:class:`~outbox.errors.ConfigurationError`) is one line on stderr, ``prog command:
    why``, and exit status 2."""
    try:
        return parts[args.command](args)
    except ConfigurationError as exc:
        print(f"{prog} {args.command}: {exc}", file=sys.stderr)
        return 2


def check_start(prog: str, command: str, outbox: Outbox, *, broker: bool = True) -> int:
    """Before a part says "ready": the shop's database answers and is migrated (``SHOP_DB``)
    and, for the relay and the checker (``broker``), the broker setting can work
    (``SHOP_BROKER``). 0 when all is well, else one line on stderr and 2."""
    from outbox.cli_commands import check_database, startup_checks

    migrate_with = f"{prog} migrate"
    try:
        if broker:
            startup_checks(command, outbox, db_setting="SHOP_DB", migrate_with=migrate_with)
        else:
            check_database(outbox.engine, setting="SHOP_DB", migrate_with=migrate_with)
    except ConfigurationError as exc:
        print(f"{prog} {command}: {str(exc).replace('--broker', 'SHOP_BROKER')}",
              file=sys.stderr, flush=True)
        return 2
    return 0


def serve_checker(outbox: Outbox) -> int:
    """The ``checker`` part: answer the broker's check-backs for ``outbox``; prints
    ``checker ready``."""
    from outbox.checkback_runner import run_checker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run_checker(outbox, on_ready=lambda: print("checker ready", flush=True))


def shop_broker(env: dict[str, str]) -> str:
    """``SHOP_BROKER``, checked here so a typo is one line naming it, not a failed request."""
    broker = env.get("SHOP_BROKER", "127.0.0.1:10911")
    parse_broker_address(broker, setting="SHOP_BROKER")
    return broker
