"""What the Flask and FastAPI shops' ``run`` modules share: their commands and the checker.

Both shops run the same parts (``migrate``, ``web``, ``relay``, ``checker``,
``inventory``); :func:`shop_parser` declares them once and each ``run``
module adds its own options. :func:`serve_checker` is the ``checker`` part.
"""

from __future__ import annotations

import argparse
import logging

from outbox import Outbox

__all__ = ["COMMANDS", "serve_checker", "shop_parser"]

#: the parts a shop's ``run`` starts, in the order ``--help`` lists them
COMMANDS = ("migrate", "web", "relay", "checker", "inventory")


def shop_parser(prog: str) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """``prog``'s parser with one sub-command per part (``web`` with ``--host``, ``--port``),
    and those sub-commands' parsers by name, for the options only one shop has."""
    parser = argparse.ArgumentParser(prog=prog)
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {name: sub.add_parser(name) for name in COMMANDS}
    commands["web"].add_argument("--host", default="127.0.0.1")
    commands["web"].add_argument("--port", type=int, default=8000)
    return parser, commands


def serve_checker(outbox: Outbox) -> int:
    """The ``checker`` part: answer the broker's check-backs for ``outbox``; prints
    ``checker ready``."""
    from outbox.checker import run_checker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    return run_checker(outbox, on_ready=lambda: print("checker ready", flush=True))
