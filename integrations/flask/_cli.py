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

from integrations.flask._extension import state_for
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

    state = state_for(current_app._get_current_object())  # type: ignore[attr-defined]
    try:
        engine = state.base_outbox.engine
        before = migrate.current(engine) if not sql else None
        migrate.upgrade(engine, revision, sql=sql, output=sys.stdout if sql else None)
    except OutboxError as exc:
        raise _fail(exc) from exc
    if not sql:
        after = migrate.current(engine)
        click.echo(f"rocketbox migrate: {before or 'empty'} -> {after}")


@rocketbox_cli.command("status", help="Backlog, oldest pending row and parked rows.")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
@with_appcontext
def status_command(as_json: bool) -> None:
    from outbox.status import read_status, render_status

    state = state_for(current_app._get_current_object())  # type: ignore[attr-defined]
    result = read_status(state.base_outbox.engine)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        render_status(result, Console())


class _SettingsError(click.ClickException, ConfigurationError):
    """A broker setting that cannot work: one line, exit 2 (as ``rocketbox`` does)."""

    exit_code = 2


def _preflight(command: str, outbox: Outbox) -> None:
    from outbox.cli_commands import preflight

    try:
        preflight(command, outbox)
    except ConfigurationError as exc:
        raise _SettingsError(str(exc)) from None


@rocketbox_cli.command("relay", help="Run the Celery relay worker (with its sweeper lane).")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--no-beat", "beat", flag_value=False, default=True,
              help="do not run the sweeper lane in this worker")
@click.option("--no-checker", "checker", flag_value=False, default=True,
              help="do not answer check-backs in this worker")
@click.option("--loglevel", default="INFO", show_default=True)
@with_appcontext
def relay_command(concurrency: int, beat: bool, checker: bool, loglevel: str) -> None:
    from outbox.celery import run_worker

    state = state_for(current_app._get_current_object())  # type: ignore[attr-defined]
    broker = state.celery_broker
    if not broker:
        raise click.ClickException("ROCKETBOX_CELERY_BROKER is '' (no Celery): the relay "
                                   "worker needs a Celery broker")
    _preflight("relay", state.base_outbox)
    code = run_worker(state.base_outbox, celery_broker=broker,
                      celery_backend=current_app.config["ROCKETBOX_CELERY_BACKEND"],
                      concurrency=concurrency, beat=beat, loglevel=loglevel,
                      checker=checker, settings=current_app.config["ROCKETBOX_CELERY_SETTINGS"])
    sys.exit(code)


@rocketbox_cli.command("checker", help="Answer the broker's check-backs from the status table.")
@with_appcontext
def checker_command() -> None:
    from outbox.checker import run_checker

    state = state_for(current_app._get_current_object())  # type: ignore[attr-defined]
    outbox = state.base_outbox
    _preflight("checker", outbox)
    sys.exit(run_checker(outbox, on_ready=lambda: click.echo(
        f"rocketbox checker ready group={outbox.producer_group} broker={outbox.broker}")))
