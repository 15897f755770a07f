"""The ``broker-lite`` command line (DESIGN.md §4).

Each subcommand lives in its own module and registers itself on the parser;
``main`` dispatches. Commands print JSON lines where other tools read them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker-lite",
        description="broker_lite: a RocketMQ-style broker with transactional messages.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    from broker_lite.cli import demo, inspect_cmd, serve

    serve.register(sub)
    for name in ("send", "consume", "topic", "bench"):
        module = _optional(name)
        if module is not None:
            module.register(sub)
    inspect_cmd.register(sub)
    demo.register(sub)
    return parser


def _optional(name: str) -> Any:
    """A client-side command module, if this install has it."""
    try:
        return importlib.import_module(f"broker_lite.cli.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"broker_lite.cli.{name}":
            raise
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout closed early (``| head``): not an error for a JSON-lines tool.
        sys.stderr.close()
        return 0
    return code
