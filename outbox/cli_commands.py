"""What each ``rocketbox`` subcommand does (:mod:`outbox.cli` builds the parser).

Every handler takes the parsed arguments and returns the exit status. They
raise :class:`CommandError` for a one-line failure, and
:class:`NotConnected` when the database does not answer; ``outbox.cli``
turns both into a line on stderr.

``relay`` and ``checker`` import their implementation only when they run,
so ``rocketbox`` works (and says so) before those parts are installed.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import Engine, make_url
from sqlalchemy import inspect as inspect_db
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from outbox import migrate as migrations
from outbox.config import Outbox
from outbox.errors import ConfigurationError, OutboxError
from outbox.models import transaction_table
from outbox.targets.address import parse_broker_address

__all__ = [
    "CommandError",
    "DatabaseNotReady",
    "NotConnected",
    "build_outbox",
    "check_database",
    "checker",
    "describe_db_error",
    "migrate",
    "open_engine",
    "relay",
    "replay",
    "retention",
    "startup_checks",
    "status",
    "stop_on_signals",
]


class CommandError(OutboxError):
    """A one-line failure for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class NotConnected(OutboxError):
    """The first connection to ``--db`` failed; the driver's error is the cause."""

    retriable = True


class DatabaseNotReady(ConfigurationError):
    """At start: the outbox's database does not answer, or is not migrated to head.

    The message names the setting (``--db``, ``ROCKETBOX_DATABASE``, ...) and
    what to do; ``setting`` holds it too.
    """


def describe_db_error(exc: BaseException, url: str | None) -> str:
    """``cannot connect to URL: reason`` from a driver error, password hidden."""
    shown = url or "the database"
    if url:
        with contextlib.suppress(SQLAlchemyError):
            shown = make_url(url).render_as_string(hide_password=True)
    reason = str(getattr(exc, "orig", None) or exc)
    lines = [line.strip() for line in reason.splitlines() if line.strip()]
    reason = lines[0] if lines else type(exc).__name__
    if "failed: " in reason:
        reason = reason.rsplit("failed: ", 1)[1]
    for prefix in ("FATAL:", "connection failed:"):
        if reason.startswith(prefix):
            reason = reason[len(prefix):].strip()
    if len(reason) > 1 and reason[0].isupper() and reason[1].islower():
        reason = reason[0].lower() + reason[1:]
    return f"cannot connect to {shown}: {reason}"


def check_database(engine: Engine, *, setting: str, migrate_with: str) -> None:
    """Fail at start unless ``engine``'s database answers and holds rocketbox's tables at
    the Alembic head this rocketbox ships (``migrate_with``: the command that fixes it).

    A database whose tables were made without Alembic (``metadata.create_all``)
    passes when every table is there.
    """
    from outbox.models import metadata

    url = engine.url.render_as_string(hide_password=False)
    shown = engine.url.render_as_string(hide_password=True)
    alembic_log = logging.getLogger("alembic.runtime.migration")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)  # not its "Context impl SQLiteImpl." lines
    try:
        with engine.connect() as conn:
            revision = migrations.current(conn)
            tables = set(inspect_db(conn).get_table_names())
    except DBAPIError as exc:
        raise DatabaseNotReady(f"{setting}: the database does not answer: "
                               f"{describe_db_error(exc, url)}", setting=setting) from None
    finally:
        alembic_log.setLevel(level)
    heads = migrations.heads()
    if revision is None:
        missing = sorted(set(metadata.tables) - tables)
        if missing:
            raise DatabaseNotReady(
                f"{setting}: {shown} has no rocketbox tables ({', '.join(missing[:3])}"
                f"{' ...' if len(missing) > 3 else ''} missing); run `{migrate_with}` first",
                setting=setting)
        return
    if revision not in heads:
        raise DatabaseNotReady(
            f"{setting}: {shown} is at rocketbox migration {revision}, this rocketbox needs "
            f"{', '.join(heads)}; run `{migrate_with}`", setting=setting)


def startup_checks(command: str, outbox: Outbox, *, db_setting: str, migrate_with: str,
                   group: str | None = None) -> None:
    """What every relay and checker entry point checks before it says "ready".

    The database (:func:`check_database`) and then the broker (:func:`preflight`):
    a setting that cannot work raises :class:`~outbox.errors.ConfigurationError`
    naming it; a broker that is only down is said on stderr, and the command starts.
    (A malformed broker address never gets here: building the :class:`Outbox` refuses it.)
    """
    check_database(outbox.engine, setting=db_setting, migrate_with=migrate_with)
    preflight(command, outbox, group=group)


def _shown(url: str) -> str:
    return migrations.parse_url(url).render_as_string(hide_password=True)


def open_engine(args: argparse.Namespace) -> Engine:
    """An engine for ``--db`` that has connected once (so failures show up here)."""
    if not args.db:
        raise CommandError("--db URL is required (or set ROCKETBOX_DB_URL)")
    engine = migrations.engine_for(migrations.sync_url(args.db, setting="--db"))
    try:
        with engine.connect():
            pass
    except DBAPIError as exc:
        engine.dispose()
        raise NotConnected(str(exc)) from exc
    return engine


@contextlib.contextmanager
def _engine(args: argparse.Namespace, *, tables: bool = True) -> Iterator[Engine]:
    engine = open_engine(args)
    try:
        if tables and not inspect_db(engine).has_table(transaction_table.name):
            raise CommandError(f"no rocketbox tables in {_shown(args.db)}; run "
                               f"`rocketbox migrate --db URL` first")
        yield engine
    finally:
        engine.dispose()


def build_outbox(args: argparse.Namespace) -> Outbox:
    """The :class:`Outbox` the ``--db``/``--broker``/``--group``/key options describe."""
    broker = str(parse_broker_address(args.broker, setting="--broker"))
    engine = open_engine(args)
    try:
        return Outbox(engine=engine, broker=broker, producer_group=args.group,
                      access_key=args.access_key, secret_key=args.secret_key)
    except Exception:
        engine.dispose()
        raise


# -- migrate --------------------------------------------------------------------------------


def migrate(args: argparse.Namespace) -> int:
    if sum((args.sql, args.check, args.current)) > 1:
        raise CommandError("--sql, --check and --current go one at a time")
    if args.downgrade and (args.check or args.current):
        raise CommandError("--downgrade goes with --revision and --sql only")
    if not args.db:
        raise CommandError("--db URL is required (or set ROCKETBOX_DB_URL)")
    if args.sql:
        migrations.sync_url(args.db, setting="--db")  # a database rocketbox supports
        revision = args.revision or ("-1" if args.downgrade else "head")
        if args.downgrade and ":" not in revision:
            revision = f"head:{revision}"  # offline, Alembic needs where to start
        run = migrations.downgrade if args.downgrade else migrations.upgrade
        run(args.db, revision, sql=True, output=sys.stdout)
        return 0
    with _engine(args, tables=False) as engine:
        if args.current:
            print(migrations.current(engine) or "(none: no rocketbox migration applied)")
            return 0
        if args.check:
            return _check(engine, args.db)
        before = migrations.current(engine)
        if args.downgrade:
            migrations.downgrade(engine, args.revision or "-1")
        else:
            migrations.upgrade(engine, args.revision or "head")
        after = migrations.current(engine)
    verb = "already at" if before == after else f"{before or 'empty'} ->"
    print(f"rocketbox migrate: {_shown(args.db)}: {verb} {after or 'base (no tables)'}")
    return 0


def _check(engine: Engine, url: str) -> int:
    diffs = migrations.check(engine)
    if not diffs:
        print(f"rocketbox migrate: {_shown(url)} matches outbox.models")
        return 0
    print(f"rocketbox migrate: {_shown(url)} differs from outbox.models:")
    for line in migrations.render_diffs(diffs):
        print(f"  {line}")
    return 1


# -- status, replay, retention ----------------------------------------------------------------


def status(args: argparse.Namespace) -> int:
    from outbox.status import read_status
    from outbox.status_render import render_status

    with _engine(args) as engine:
        result = read_status(engine, parked_limit=args.parked_limit)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        render_status(result, Console())
    return 0


def replay(args: argparse.Namespace) -> int:
    from outbox.replay import replay as replay_rows

    if bool(args.tx_ids) == bool(args.all_parked):
        raise CommandError("give TX_IDs or --all-parked (one of the two)")
    with _engine(args) as engine:
        if args.all_parked:
            result = replay_rows(engine, all_parked=True)
        else:
            result = replay_rows(engine, args.tx_ids)
    print(f"replayed {len(result.replayed)} parked row(s)")
    for label, ids in (("not parked", result.not_parked),
                       ("already relayed", result.already_relayed),
                       ("unknown", result.unknown)):
        if ids:
            print(f"rocketbox replay: {label}, left alone: {' '.join(ids)}", file=sys.stderr)
    return 0 if result.complete else 1


def retention(args: argparse.Namespace) -> int:
    from outbox.retention import count_expired, purge

    now = datetime.now(UTC)
    relayed_before = now - timedelta(days=args.days)
    inbox_before = None if args.inbox_days is None else now - timedelta(days=args.inbox_days)
    with _engine(args) as engine:
        if args.dry_run:
            rows, inbox = count_expired(engine, relayed_before=relayed_before,
                                        inbox_before=inbox_before)
            print(f"would delete {rows} relayed row(s) and {inbox} inbox row(s)")
            return 0
        if args.no_progress:
            report = purge(engine, relayed_before=relayed_before, inbox_before=inbox_before,
                           batch=args.batch)
        else:
            rows, inbox = count_expired(engine, relayed_before=relayed_before,
                                        inbox_before=inbox_before)
            with _progress_bar(rows, inbox if inbox_before is not None else None) as advance:
                report = purge(engine, relayed_before=relayed_before,
                               inbox_before=inbox_before, batch=args.batch, progress=advance)
    print(f"deleted {report.transactions} relayed row(s) and {report.inbox} inbox row(s) "
          f"in {report.batches} batch(es)")
    return 0


@contextlib.contextmanager
def _progress_bar(rows: int, inbox: int | None) -> Iterator[Callable[[str, int], None]]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=Console(stderr=True))
    tasks = {"rocketbox_transaction": progress.add_task("relayed rows", total=rows)}
    if inbox is not None:
        tasks["rocketbox_inbox"] = progress.add_task("inbox rows", total=inbox)

    def advance(table: str, deleted: int) -> None:
        progress.advance(tasks[table], deleted)

    with progress:
        yield advance


# -- relay and checker ------------------------------------------------------------------------


def _load(command: str, module: str, name: str) -> Any:
    """``module.name``, or "not available" when that module (or its package) is missing."""
    try:
        loaded = __import__(module, fromlist=[name])
    except ModuleNotFoundError as exc:
        if exc.name and module.startswith(exc.name) and exc.name.startswith("outbox"):
            raise CommandError("not available in this version yet") from exc
        raise
    try:
        return getattr(loaded, name)
    except AttributeError:
        raise CommandError("not available in this version yet") from None


def _accepts(function: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _serve_metrics(args: argparse.Namespace, outbox: Outbox) -> None:
    if args.metrics_port is None:
        return
    from outbox.metrics import start_metrics_server

    server = start_metrics_server(args.metrics_port, args.metrics_addr, engine=outbox.engine)
    print(f"rocketbox {args.command}: metrics on http://{args.metrics_addr}:"
          f"{server.server_port}/metrics", file=sys.stderr, flush=True)


_MIGRATE = "rocketbox migrate --db URL"


def preflight(command: str, outbox: Outbox, *, group: str | None = None) -> None:
    """Fail fast on a broker setting that cannot work; go on through an outage.

    A host that does not resolve, refused credentials or a refused producer
    group raise :class:`~outbox.errors.ConfigurationError` (exit 2, one line
    naming the setting). A refused connection or a timeout is an outage: it
    is recorded for ``rocketbox status`` and said on stderr, and the command
    starts anyway (the relay retries with backoff; the checker reconnects).
    """
    from outbox import broker_health

    outage = broker_health.probe(outbox, group=group)
    if outage is not None:
        broker_health.pass_failed(outbox, outage)
        print(f"rocketbox {command}: broker {outbox.broker_display} unreachable ({outage}); "
              f"starting anyway, retrying with backoff (`rocketbox status` shows it)",
              file=sys.stderr, flush=True)


def relay(args: argparse.Namespace) -> int:
    run_worker = _load("relay", "outbox.celery.worker", "run_worker")
    sqla_prefix: str = _load("relay", "outbox.celery.sqla", "SQLA_PREFIX")
    outbox = build_outbox(args)
    try:
        startup_checks("relay", outbox, db_setting="--db", migrate_with=_MIGRATE)
        _serve_metrics(args, outbox)
        extra: dict[str, Any] = {}
        if not args.checker and _accepts(run_worker, "checker"):
            extra["checker"] = False
        code: int = run_worker(
            outbox, celery_broker=args.celery_broker or sqla_prefix + outbox.engine.url
            .render_as_string(hide_password=False),
            celery_backend=args.celery_backend, concurrency=args.concurrency,
            sweeper=args.sweeper, loglevel=args.log_level.upper(), **extra)
        return code
    finally:
        outbox.engine.dispose()


def checker(args: argparse.Namespace) -> int:
    run_checker = _load("checker", "outbox.checkback_runner", "run_checker")
    outbox = build_outbox(args)
    try:
        with stop_on_signals() as stop:
            startup_checks("checker", outbox, db_setting="--db", migrate_with=_MIGRATE,
                           group=outbox.producer_group)
            _serve_metrics(args, outbox)
            extra: dict[str, Any] = {}
            if _accepts(run_checker, "on_ready"):
                extra["on_ready"] = lambda: print(
                    f"rocketbox checker ready group={outbox.producer_group} "
                    f"broker={outbox.broker_display}", flush=True)
            code: int = run_checker(outbox, stop=stop, **extra)
            return code
    finally:
        outbox.engine.dispose()


def broker_export(args: argparse.Namespace) -> int:
    """``rocketbox broker-export``: the broker's kind writes its export (outbox.targets)."""
    from pathlib import Path

    from sqlalchemy import create_engine

    from outbox.targets.choose import export_messages

    out = Path(args.out)
    if out.is_dir():
        raise CommandError(f"--out: {args.out} is a directory; give a file name")
    if not out.parent.is_dir():
        raise CommandError(f"--out: no such directory: {out.parent}")
    broker = str(parse_broker_address(args.broker, setting="--broker"))
    engine = create_engine("sqlite://")  # an export reads the broker only, never the database
    try:
        outbox = Outbox(engine=engine, broker=broker, access_key=args.access_key,
                        secret_key=args.secret_key)
        count = export_messages(outbox, out, source=args.source)
    finally:
        engine.dispose()
    print(f"rocketbox broker-export: {count} message(s) from {outbox.broker_display} -> {args.out}")
    return 0


@contextlib.contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event SIGTERM and SIGINT set while the block runs; their handlers come back after."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
