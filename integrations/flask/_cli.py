"""``flask rocketbox relay|checker|status|migrate``: the outbox's commands for one app.

They read everything from the app's ``ROCKETBOX_*`` configuration, so the
relay and the check-back responder run with exactly the settings the views
publish with.
"""

from __future__ import annotations

import json
import sys

import click
from flask import current_app
from flask.cli import with_appcontext
from rich.console import Console
from sqlalchemy.exc import DBAPIError

from integrations.flask._state import state_for
from outbox.config import Outbox
from outbox.errors import ConfigurationError, OutboxError

__all__ = ["rocketbox_cli"]


@click.group("rocketbox", help="rocketbox: migrate, relay, check-back and status.")
def rocketbox_cli() -> None:
    pass


def _fail(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@rocketbox_cli.command("migrate", help="Create or upgrade the outbox tables (Alembic).")
@click.option("--revision", default="head", show_default=True, help="target revision")
@click.option("--sql", is_flag=True, help="print the SQL instead of running it")
@with_appcontext
def migrate_command(revision: str, sql: bool) -> None:
    from outbox import migrate

    engine = _outbox().engine
    try:
        before = migrate.current(engine) if not sql else None
        migrate.upgrade(engine, revision, sql=sql, output=sys.stdout if sql else None)
    except OutboxError as exc:
        raise _fail(exc) from exc
    except DBAPIError as exc:
        from outbox.cli_commands import describe_db_error

        raise _SettingsError("ROCKETBOX_DATABASE: " + describe_db_error(
            exc, engine.url.render_as_string(hide_password=False))) from None
    if not sql:
        after = migrate.current(engine)
        click.echo(f"rocketbox migrate: {before or 'empty'} -> {after}")


@rocketbox_cli.command("status", help="Backlog, oldest pending row and parked rows.")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
@with_appcontext
def status_command(as_json: bool) -> None:
    from outbox.status import read_status
    from outbox.status_render import render_status

    outbox = _outbox()
    _check_database(outbox)
    result = read_status(outbox.engine)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render_status(result, Console())


class _SettingsError(click.ClickException, ConfigurationError):
    """A broker setting that cannot work: one line, exit 2 (as ``rocketbox`` does)."""

    exit_code = 2


#: how a ``flask rocketbox`` user migrates (what the start-up check tells them to run)
_MIGRATE = "flask rocketbox migrate"


def _outbox() -> Outbox:
    """The app's outbox (without ``on_commit``); a setting it cannot be built from is one line."""
    state = state_for(current_app._get_current_object())  # type: ignore[attr-defined]
    try:
        return state.base_outbox
    except ConfigurationError as exc:
        raise _SettingsError(str(exc)) from None


def _startup_checks(command: str, outbox: Outbox) -> None:
    """The database (reachable, migrated) and the broker, before the command says "ready"."""
    from outbox.cli_commands import startup_checks

    try:
        startup_checks(command, outbox, db_setting="ROCKETBOX_DATABASE", migrate_with=_MIGRATE)
    except ConfigurationError as exc:
        raise _SettingsError(str(exc)) from None


def _check_database(outbox: Outbox) -> None:
    from outbox.cli_commands import check_database

    try:
        check_database(outbox.engine, setting="ROCKETBOX_DATABASE", migrate_with=_MIGRATE)
    except ConfigurationError as exc:
        raise _SettingsError(str(exc)) from None


@rocketbox_cli.command("relay", help="Run the Celery relay worker (with its sweeper lane).")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--no-sweeper", "sweeper", flag_value=False, default=True,
              help="do not run the sweeper lane in this worker")
@click.option("--no-beat", "sweeper", flag_value=False, hidden=True,
              help="the old name of --no-sweeper")
@click.option("--no-checker", "checker", flag_value=False, default=True,
              help="do not answer check-backs in this worker")
@click.option("--loglevel", default="INFO", show_default=True)
@with_appcontext
def relay_command(concurrency: int, sweeper: bool, checker: bool, loglevel: str) -> None:
    from outbox.celery import run_worker

    state = state_for(current_app._get_current_object())  # type: ignore[attr-defined]
    outbox = _outbox()
    broker = state.celery_broker
    if not broker:
        raise click.ClickException("ROCKETBOX_CELERY_BROKER is '' (no Celery): the relay "
                                   "worker needs a Celery broker")
    _startup_checks("relay", outbox)
    code = run_worker(state.base_outbox, celery_broker=broker,
                      celery_backend=current_app.config["ROCKETBOX_CELERY_BACKEND"],
                      concurrency=concurrency, sweeper=sweeper, loglevel=loglevel,
                      checker=checker, settings=current_app.config["ROCKETBOX_CELERY_SETTINGS"])
    sys.exit(code)


@rocketbox_cli.command("checker", help="Answer the broker's check-backs from the status table.")
@with_appcontext
def checker_command() -> None:
    from outbox.checkback_runner import run_checker

    outbox = _outbox()
    _startup_checks("checker", outbox)
    sys.exit(run_checker(outbox, on_ready=lambda: click.echo(
        f"rocketbox checker ready group={outbox.producer_group} broker={outbox.broker_display}")))
