"""The ``broker-lite`` command line (docs/design.md §5).

Each subcommand lives in its own module and registers itself on the parser;
``main`` dispatches. Commands print JSON lines where other tools read them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="broker-lite",
        description="broker_lite: a RocketMQ-style broker with transactional messages.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    from broker_lite.cli import (
        acl_cmd,
        bench,
        consume,
        demo,
        inspect_cmd,
        migrate_cmd,
        send,
        serve,
        topic,
    )

    for module in (serve, send, consume, topic, bench, inspect_cmd, migrate_cmd, demo,
                   acl_cmd):
        module.register(sub)
    return parser


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
