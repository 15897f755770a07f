"""The ``rocketbox`` command: migrations, operations and the outbox's long-running parts.

``rocketbox COMMAND --help`` explains each command. The contract other tools
rely on (docs/design.md §5): ``migrate``, ``relay``, ``checker``, ``audit`` and
``demo``; ``status``, ``replay`` and ``retention`` are for operators.

Exit codes: 0 success; 1 the command ran and found a problem (``migrate
--check`` found differences, ``replay`` could not replay every id); 2 bad
usage, bad settings, or a database or module that is not there; 130
interrupted. Errors are one line on stderr; ``--debug`` shows the traceback.

This is an edge, so it may read the environment: ``ROCKETBOX_DB_URL``,
``ROCKETBOX_ACCESS_KEY`` and ``ROCKETBOX_SECRET_KEY`` stand in for the
options of the same meaning (keep secrets off the command line).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from broker_lite.extras import extra_for, needs_extra
from outbox import cli_commands
from outbox.cli_commands import CommandError, NotConnected, describe_db_error
from outbox.errors import ConfigurationError, OutboxError

__all__ = ["build_parser", "describe_db_error", "main"]

DEFAULT_BROKER = "127.0.0.1:10911"
DEFAULT_GROUP = "rocketbox"
#: commands whose arguments go untouched to another program's ``main(argv)``
PASS_THROUGH: dict[str, tuple[str, str]] = {
    "audit": ("spark.audit_job", "the Spark audit job (docs/design.md §3E)"),
    "demo": ("outbox.demo", "the end-to-end demo on embedded defaults"),
}
_N = TypeVar("_N", int, float)
_EPILOG = """\
environment: ROCKETBOX_DB_URL, ROCKETBOX_ACCESS_KEY, ROCKETBOX_SECRET_KEY stand in for
--db, --access-key, --secret-key.
exit codes: 0 ok, 1 problem found, 2 usage/settings/database error, 130 interrupted.
"""


# -- parser ---------------------------------------------------------------------------------


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keep the descriptions' line breaks; add ``(default: X)`` where it says something.

    Not for flags (``--no-sweeper``'s default ``True`` would read as if both were
    on), options without a default (``None``), or help that already says its
    default in words.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or action.nargs == 0 or "default" in text
                or action.default in (None, argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


def _db_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("database and output")
    group.add_argument("--db", metavar="URL", default=os.environ.get("ROCKETBOX_DB_URL"),
                       help="SQLAlchemy URL of the database holding the outbox tables, e.g. "
                            "sqlite:///app.db or postgresql+psycopg://user:pw@host/db "
                            "(default: $ROCKETBOX_DB_URL)")
    group.add_argument("--debug", action="store_true",
                       help="show tracebacks instead of one-line errors")
    group.add_argument("--log-level", default="WARNING", metavar="LEVEL",
                       help="log level: DEBUG, INFO, WARNING, ERROR")
    group.add_argument("--log-format", choices=("kv", "json"), default="kv",
                       help="log lines as key=value pairs or JSON objects (tx_id included)")


def _broker_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("broker")
    group.add_argument("--broker", metavar="ADDRESS", default=DEFAULT_BROKER,
                       help="HOST:PORT or broker-lite://HOST:PORT (broker_lite's native door), "
                            "or rocketmq://HOST:PORT[,HOST:PORT...] (Apache RocketMQ 5 "
                            "proxies; rocketmqs:// for TLS; docs/rocketmq.md)")
    group.add_argument("--group", metavar="NAME", default=DEFAULT_GROUP,
                       help="producer group the outbox publishes (and answers check-backs) as")
    group.add_argument("--access-key", metavar="KEY",
                       default=os.environ.get("ROCKETBOX_ACCESS_KEY"),
                       help="access key of the broker's ACL account (`broker-lite serve "
                            "--acl`; default: $ROCKETBOX_ACCESS_KEY, else none: no ACL)")
    group.add_argument("--secret-key", metavar="SECRET",
                       default=os.environ.get("ROCKETBOX_SECRET_KEY"),
                       help="its secret key (default: $ROCKETBOX_SECRET_KEY; keep it off "
                            "the command line)")
    group.add_argument("--metrics-port", type=_port, metavar="PORT",
                       help="serve Prometheus metrics on this port (0 picks one; default: off)")
    group.add_argument("--metrics-addr", metavar="ADDR", default="127.0.0.1",
                       help="address the metrics server listens on (it has no authentication: "
                            "0.0.0.0 exposes it to the network)")


def _port(text: str) -> int:
    value = _int_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def _number(text: str, cast: Callable[[str], _N], what: str) -> _N:
    """``cast(text)``, or the error ``expected WHAT, got 'TEXT'``."""
    try:
        return cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _number(text, int, "a whole number")
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    return parse


def _days(text: str) -> float:
    value = _number(text, float, "a number of days")
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"days must be >= 0, got {text}")
    return value


def _add(sub: Any, name: str, help_text: str, description: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help_text, description=description, formatter_class=_Formatter,
        epilog=_EPILOG)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (``audit`` and ``demo`` are listed; their own parsers run)."""
    parser = argparse.ArgumentParser(
        prog="rocketbox", formatter_class=_Formatter, epilog=_EPILOG,
        description="rocketbox: a transactional outbox relayed to broker_lite.\n\n"
                    "First run `rocketbox migrate --db URL`, then `rocketbox relay` and "
                    "`rocketbox checker`\nnext to your application.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _add(sub, "migrate", "create or upgrade the outbox tables (Alembic)",
             "Apply rocketbox's Alembic migrations to --db. They record their revision in\n"
             "rocketbox_alembic_version, so an application's own Alembic history is untouched.\n"
             "With --sql nothing connects: only the URL's dialect matters, e.g.\n"
             "  rocketbox migrate --db postgresql:// --sql > rocketbox.sql")
    _db_options(p)
    p.add_argument("--revision", metavar="R",
                   help="target revision (default: head; with --downgrade: one step back, "
                        "'base' drops the tables)")
    p.add_argument("--downgrade", action="store_true", help="downgrade instead of upgrading")
    p.add_argument("--sql", action="store_true",
                   help="print the SQL instead of running it (offline mode)")
    p.add_argument("--check", action="store_true",
                   help="compare the database with the models (alembic check); exit 1 on "
                        "differences")
    p.add_argument("--current", action="store_true", help="print the current revision")
    p.set_defaults(handler=cli_commands.migrate)

    p = _add(sub, "status", "backlog, oldest pending row, parked rows, recent relays",
             "Per topic: rows waiting for the relay (pending, in flight), the age of the\n"
             "oldest one, parked rows (listed with their last error) and rows relayed in\n"
             "the last hour.")
    _db_options(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--parked-limit", type=_int_at_least(0), default=20, metavar="N",
                   help="list at most N parked rows (newest first)")
    p.set_defaults(handler=cli_commands.status)

    p = _add(sub, "replay", "un-park rows so the relay tries them again",
             "Give parked rows a fresh set of attempts: parked=false, attempts=0,\n"
             "next_attempt_at=now. last_error is kept until the next attempt replaces or\n"
             "clears it. The relay's sweeper picks the rows up on its next sweep.\n"
             "Exit 1 if some given ids were unknown, not parked or already relayed.")
    _db_options(p)
    p.add_argument("tx_ids", nargs="*", metavar="TX_ID", help="rows to replay")
    p.add_argument("--all-parked", action="store_true", help="replay every parked row")
    p.set_defaults(handler=cli_commands.replay)

    p = _add(sub, "retention", "delete old relayed rows and old inbox rows, in batches",
             "Delete status rows relayed more than --days ago and, with --inbox-days,\n"
             "inbox rows processed more than that long ago. Each batch is one short\n"
             "transaction. Unrelayed and parked rows are never deleted.")
    _db_options(p)
    p.add_argument("--days", type=_days, required=True, metavar="N",
                   help="keep relayed rows for N days (fractions allowed)")
    p.add_argument("--inbox-days", type=_days, metavar="M",
                   help="keep inbox rows for M days (default: inbox rows are kept); keep "
                        "them longer than the broker may redeliver")
    p.add_argument("--batch", type=_int_at_least(1), default=1000, metavar="ROWS",
                   help="rows deleted per transaction")
    p.add_argument("--dry-run", action="store_true", help="only count what would go")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=cli_commands.retention)

    p = _add(sub, "relay", "run the Celery relay worker (with its sweeper lane)",
             "Run a Celery worker that relays committed rows to the broker: the tasks\n"
             "enqueued at commit, and a sweeper lane (a thread of the worker, no beat)\n"
             "that relays what they missed straight from the database every few seconds.\n"
             "Exits with status 1 on any fatal error. The Celery broker defaults to\n"
             "kombu's SQLAlchemy transport on --db (sqla+URL), which needs nothing else\n"
             "installed; use Redis in production: --celery-broker redis://host:6379/0.")
    _db_options(p)
    _broker_options(p)
    p.add_argument("--celery-broker", metavar="URL",
                   help="Celery broker URL (default: sqla+ followed by --db)")
    p.add_argument("--celery-backend", metavar="URL",
                   help="Celery result backend URL (default: none; relay tasks return "
                        "nothing anyone waits for)")
    p.add_argument("--concurrency", type=_int_at_least(1), default=1, metavar="N",
                   help="worker threads/processes")
    p.add_argument("--no-sweeper", dest="sweeper", action="store_false",
                   help="do not run the sweeper lane in this worker; by default each worker "
                        "runs one. Extra sweepers are harmless (a sweep claims rows like any "
                        "relay: no row goes twice), so --no-sweeper only saves their sweeps")
    p.add_argument("--no-beat", dest="sweeper", action="store_false",
                   help=argparse.SUPPRESS)  # the old name of --no-sweeper, still accepted
    p.add_argument("--no-checker", dest="checker", action="store_false",
                   help="do not answer check-backs in this worker (then run `rocketbox "
                        "checker`); by default each worker answers them")
    p.set_defaults(handler=cli_commands.relay, log_level="INFO")

    p = _add(sub, "checker", "answer the broker's check-backs from the status table",
             "Connect to the broker as the producer group and answer its check-back\n"
             "requests for orphaned halves from the status table, until SIGTERM or Ctrl-C.")
    _db_options(p)
    _broker_options(p)
    p.set_defaults(handler=cli_commands.checker, log_level="INFO")

    p = _add(sub, "broker-export", "write what the broker holds as a broker export (audit input)",
             "Read what the broker at --broker holds and write it to --out as a broker export\n"
             "(JSON Lines, docs/audit.md 'Broker export'), for `rocketbox audit --broker-export`.\n"
             "For a kind of broker without a commit log the audit decodes; broker_lite and\n"
             "RocketMQ are audited from their commit log (--commitlog) instead.")
    group = p.add_argument_group("broker and output")
    group.add_argument("--broker", metavar="ADDRESS", required=True,
                       help="the broker's address, as the relay's --broker")
    group.add_argument("--out", metavar="FILE", required=True,
                       help="the export file to write (replaced whole once written)")
    group.add_argument("--source", metavar="NAME",
                       help="what to read, when the kind cannot tell: a stream, a queue "
                            "(default: the kind's)")
    group.add_argument("--access-key", metavar="KEY",
                       default=os.environ.get("ROCKETBOX_ACCESS_KEY"),
                       help="access key of the broker's account (default: "
                            "$ROCKETBOX_ACCESS_KEY, else none)")
    group.add_argument("--secret-key", metavar="SECRET",
                       default=os.environ.get("ROCKETBOX_SECRET_KEY"),
                       help="its secret key (default: $ROCKETBOX_SECRET_KEY)")
    group.add_argument("--debug", action="store_true",
                       help="show tracebacks instead of one-line errors")
    group.add_argument("--log-level", default="WARNING", metavar="LEVEL",
                       help="log level: DEBUG, INFO, WARNING, ERROR")
    group.add_argument("--log-format", choices=("kv", "json"), default="kv",
                       help="log lines as key=value pairs or JSON objects")
    p.set_defaults(handler=cli_commands.broker_export)

    p = _add(sub, "console", "serve the operations console (web pages)",
             "Serve the operations console: outbox rows, topics, consumer groups, traces\n"
             "(/trace/TX_ID), transactions, dead letters and the audit (docs/console.md).\n"
             "Needs the console extra: pip install 'rocketbox[console]'.")
    _db_options(p)
    _broker_options(p)
    _console_options(p)
    p.set_defaults(handler=_console, log_level="INFO")

    for name, (_module, what) in PASS_THROUGH.items():
        _add(sub, name, f"run {what}",
             f"Runs {what}; every argument after `{name}` goes to it unchanged,\n"
             f"so `rocketbox {name} --help` shows its own options.")
    return parser


def _console_options(parser: argparse.ArgumentParser) -> None:
    try:
        from outbox.console.command import add_arguments
    except ImportError:  # no console extra: the command says so when run
        return
    add_arguments(parser)


def _console(args: argparse.Namespace) -> int:
    try:
        from outbox.console.command import run
    except ModuleNotFoundError as exc:
        if extra_for(exc) is None:
            raise
        raise CommandError(needs_extra("the console", "console")) from None
    return run(args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rocketbox")
    except PackageNotFoundError:
        return "(not installed)"


# -- running --------------------------------------------------------------------------------


def _pass_through(command: str, argv: list[str]) -> int:
    module_name, _what = PASS_THROUGH[command]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"rocketbox {command}: not available in this version yet", file=sys.stderr)
            return 2
        extra = extra_for(exc)
        if extra is not None:
            print(f"rocketbox {command}: {needs_extra(EXTRA_USES.get(extra, 'it'), extra)}",
                  file=sys.stderr)
            return 2
        raise
    try:
        code: int | None = module.main(argv)
    except ModuleNotFoundError as exc:  # an extra the command loads once its arguments pass
        extra = extra_for(exc)
        if extra is None:
            raise
        print(f"rocketbox {command}: {needs_extra(EXTRA_USES.get(extra, 'it'), extra)}",
              file=sys.stderr)
        return 2
    return int(code or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``rocketbox`` and ``python -m outbox``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in PASS_THROUGH:
        return _pass_through(args_list[0], args_list[1:])
    args = build_parser().parse_args(args_list)
    from outbox.log_setup import configure_logging

    root = logging.getLogger()
    saved_level = root.level
    try:
        handler = configure_logging(args.log_level, args.log_format)
    except ValueError:
        print(f"rocketbox {args.command}: --log-level: unknown level {args.log_level!r}",
              file=sys.stderr)
        return 2
    try:
        return _run(args)
    finally:  # leave the caller's logging as it was (main() also runs inside tests)
        root.removeHandler(handler)
        root.setLevel(saved_level)


def _run(args: argparse.Namespace) -> int:
    command: Callable[[argparse.Namespace], int] = args.handler
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # stdout closed early (`| head`): not an error
        return 0
    except Exception as exc:
        if args.debug:
            raise
        message, code = _one_line(exc, args)
        logging.getLogger("rocketbox.cli").debug("failed", exc_info=True)
        print(f"rocketbox {args.command}: {message}", file=sys.stderr)
        return code


#: extra -> what of rocketbox's command line needs it (the one line a missing extra gives)
EXTRA_USES = {"rocketmq": "the RocketMQ target", "console": "the console",
              "spark": "the audit", "compression": "an LZ4 or ZSTD body", "otel": "tracing",
              "django": "the Django integration", "flask": "the Flask integration",
              "fastapi": "the FastAPI integration"}


def _one_line(exc: Exception, args: argparse.Namespace) -> tuple[str, int]:
    if isinstance(exc, CommandError):
        return str(exc), exc.code
    if isinstance(exc, NotConnected):
        return describe_db_error(exc.__cause__ or exc, args.db), 2
    if isinstance(exc, ConfigurationError | OutboxError):
        return str(exc), 2
    if isinstance(exc, ModuleNotFoundError) and (extra := extra_for(exc)) is not None:
        return needs_extra(EXTRA_USES.get(extra, "this command"), extra), 2
    if isinstance(exc, DBAPIError):
        first = (str(exc.orig) or type(exc.orig).__name__).strip().splitlines()[0]
        return f"database error: {first}", 1
    if isinstance(exc, SQLAlchemyError):
        return f"database error: {exc}".splitlines()[0], 1
    return f"{type(exc).__name__}: {exc}".splitlines()[0] + " (--debug shows where)", 1

