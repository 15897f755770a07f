"""The ``rocketbox`` command line: migrate, errors, and the commands other modules provide."""

from __future__ import annotations

import subprocess
import sys
import types
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from outbox import migrate
from outbox.cli import main
from tests.outbox.cli.cli_process_support import (
    ROCKETBOX,
    LineCollector,
    rocketbox_process,
    run_rocketbox,
    terminate,
)
from tests.support import BrokerLiteServer, PostgresServer, free_port, wait_until


@pytest.mark.timeout(30)
def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("migrate", "status", "replay", "retention", "relay", "checker", "audit",
                    "demo"):
        assert f"\n    {command}" in out, command
    with pytest.raises(SystemExit):
        main(["relay", "--help"])
    relay_help = capsys.readouterr().out
    assert "sqla+" in relay_help and "--metrics-port" in relay_help
    assert "127.0.0.1:10911" in relay_help  # defaults are shown


@pytest.mark.timeout(60)
def test_migrate_a_fresh_database(cli_db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--db", cli_db_url]) == 0
    assert capsys.readouterr().out.endswith(": empty -> 0007\n")
    assert main(["migrate", "--db", cli_db_url]) == 0
    assert capsys.readouterr().out.endswith(": already at 0007\n")
    assert main(["migrate", "--db", cli_db_url, "--current"]) == 0
    assert capsys.readouterr().out == "0007\n"
    assert main(["migrate", "--db", cli_db_url, "--check"]) == 0
    assert capsys.readouterr().out.endswith(" matches outbox.models\n")

    assert main(["migrate", "--db", cli_db_url, "--downgrade", "--revision", "base"]) == 0
    assert capsys.readouterr().out.endswith(": 0007 -> base (no tables)\n")
    engine = create_engine(cli_db_url)
    try:
        assert "rocketbox_transaction" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
def test_migrate_check_fails_on_a_difference(cli_db_url: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    migrate.upgrade(cli_db_url)
    engine = create_engine(cli_db_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP INDEX ix_rocketbox_transaction_created_at"))
    finally:
        engine.dispose()
    assert main(["migrate", "--db", cli_db_url, "--check"]) == 1
    out = capsys.readouterr().out
    assert "differs from outbox.models" in out
    assert "  add_index: rocketbox_transaction.ix_rocketbox_transaction_created_at" in out


@pytest.mark.timeout(30)
def test_migrate_sql_prints_sql_without_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "--db", "postgresql://", "--sql"]) == 0
    out = capsys.readouterr().out
    assert "CREATE SEQUENCE rocketbox_transaction_seq;" in out
    assert "CREATE TABLE rocketbox_transaction (" in out
    assert main(["migrate", "--db", "postgresql://", "--sql", "--downgrade",
                 "--revision", "base"]) == 0
    out = capsys.readouterr().out
    assert "DROP TABLE rocketbox_inbox;" in out and "DROP SEQUENCE" in out


@pytest.mark.timeout(30)
def test_an_unreachable_database_is_one_line_and_exit_2() -> None:
    port = free_port()
    url = f"postgresql+psycopg://app:s3cret@127.0.0.1:{port}/shop"
    for module in (False, True):  # the console script and python -m outbox
        done = run_rocketbox(["migrate", "--db", url], module=module)
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr == (f"rocketbox migrate: cannot connect to "
                               f"postgresql+psycopg://app:***@127.0.0.1:{port}/shop: "
                               f"connection refused\n")


@pytest.mark.timeout(60)
def test_debug_shows_the_traceback() -> None:
    url = f"postgresql+psycopg://app@127.0.0.1:{free_port()}/shop"
    done = run_rocketbox(["status", "--db", url, "--debug"])
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "OperationalError" in done.stderr


@pytest.mark.parametrize("url, message", [
    ("not-a-url", "rocketbox status: cannot parse database URL 'not-a-url': expected e.g. "
                  "sqlite:///app.db or postgresql+psycopg://user:password@host:5432/dbname"),
    ("nosuchdb://host/db", "rocketbox status: unknown database driver 'nosuchdb' in "
                           "nosuchdb://host/db"),
    ("sqlite:////nonexistent-dir/app.db", "rocketbox status: cannot connect to "
                                          "sqlite:////nonexistent-dir/app.db: unable to open "
                                          "database file"),
])
@pytest.mark.timeout(30)
def test_bad_urls_are_one_line_and_exit_2(url: str, message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--db", url]) == 2
    assert capsys.readouterr().err == message + "\n"


@pytest.mark.postgres
@pytest.mark.timeout(30)
def test_wrong_credentials_and_missing_database(postgres_server: PostgresServer,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    host = f"{postgres_server.host}:{postgres_server.port}"
    assert main(["migrate", "--db", f"postgresql+psycopg://nobody:pw@{host}/postgres"]) == 2
    assert capsys.readouterr().err == (
        f"rocketbox migrate: cannot connect to postgresql+psycopg://nobody:***@{host}/postgres:"
        f' role "nobody" does not exist\n')
    assert main(["migrate", "--db", f"postgresql+psycopg://postgres@{host}/no_such_db"]) == 2
    assert capsys.readouterr().err == (
        f"rocketbox migrate: cannot connect to postgresql+psycopg://postgres@{host}/no_such_db:"
        f' database "no_such_db" does not exist\n')


@pytest.mark.timeout(30)
def test_commands_need_a_database_with_the_tables(sqlite_url: str,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETBOX_DB_URL", raising=False)
    assert main(["status"]) == 2
    assert capsys.readouterr().err == \
        "rocketbox status: --db URL is required (or set ROCKETBOX_DB_URL)\n"
    assert main(["replay", "--db", sqlite_url, "--all-parked"]) == 2
    assert capsys.readouterr().err == (f"rocketbox replay: no rocketbox tables in {sqlite_url};"
                                       " run `rocketbox migrate --db URL` first\n")


@pytest.mark.timeout(60)
def test_the_database_url_can_come_from_the_environment(sqlite_url: str) -> None:
    done = run_rocketbox(["migrate"], env={"ROCKETBOX_DB_URL": sqlite_url})
    assert done.returncode == 0, done.stderr
    done = run_rocketbox(["status", "--json"], env={"ROCKETBOX_DB_URL": sqlite_url})
    assert done.returncode == 0 and '"pending": 0' in done.stdout


@pytest.mark.parametrize("command, module", [
    (["relay"], "outbox.celery.worker"),
    (["checker"], "outbox.checkback_runner"),
    (["audit", "--anything"], "spark.audit_job"),
    (["demo"], "outbox.demo"),
])
@pytest.mark.timeout(30)
def test_a_missing_module_is_not_available_yet(command: list[str], module: str, sqlite_url: str,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # `import module` fails as if absent
    assert main([*command, "--db", sqlite_url]) == 2
    assert capsys.readouterr().err == \
        f"rocketbox {command[0]}: not available in this version yet\n"


@pytest.mark.timeout(30)
def test_audit_and_demo_get_their_arguments_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    for name in ("outbox.demo", "spark.audit_job"):
        module = types.ModuleType(name)
        module.main = fake_main  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    assert main(["demo", "--db", "x", "--help"]) == 7
    assert main(["audit", "--since", "1h"]) == 7
    assert seen == [["--db", "x", "--help"], ["--since", "1h"]]


@pytest.mark.timeout(30)
def test_relay_builds_the_outbox_and_the_worker_settings(sqlite_url: str,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    calls: list[tuple[Any, dict[str, Any]]] = []
    worker = types.ModuleType("outbox.celery.worker")

    def run_worker(outbox: Any, **kwargs: Any) -> int:
        calls.append((outbox, kwargs))
        return 0

    worker.run_worker = run_worker  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "outbox.celery.worker", worker)
    migrate.upgrade(sqlite_url)  # the relay checks the tables before it starts
    assert main(["relay", "--db", sqlite_url, "--broker", "10.0.0.5:9876", "--group", "shop",
                 "--access-key", "ak", "--secret-key", "sk", "--concurrency", "4",
                 "--no-sweeper"]) == 0
    assert main(["relay", "--db", sqlite_url, "--broker", "10.0.0.5:9876",
                 "--no-beat"]) == 0  # the old name, still accepted
    assert calls[1][1]["sweeper"] is False
    assert main(["relay", "--db", sqlite_url, "--broker", "10.0.0.5:9876"]) == 0
    assert calls[2][1]["sweeper"] is True
    del calls[1:]
    ((outbox, kwargs),) = calls
    assert (outbox.broker, outbox.producer_group, outbox.access_key, outbox.secret_key) == \
        ("10.0.0.5:9876", "shop", "ak", "sk")
    assert str(outbox.engine.url) == sqlite_url
    assert kwargs == {"celery_broker": f"sqla+{sqlite_url}", "celery_backend": None,
                      "concurrency": 4, "sweeper": False, "loglevel": "INFO"}


@pytest.mark.timeout(30)
def test_a_bad_broker_address_is_one_line(sqlite_url: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checker", "--db", sqlite_url, "--broker", "nohost"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rocketbox checker: --broker = 'nohost': endpoint 'nohost' has no "
                          "HOST:PORT; expected HOST:PORT (broker_lite)")
    assert err.count("\n") == 1


@pytest.mark.timeout(90)
def test_checker_serves_metrics_and_stops_on_sigterm(broker_lite_server: BrokerLiteServer,
                                                     tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'checker.sqlite'}"
    migrate.upgrade(url)
    with rocketbox_process(["checker", "--db", url, "--broker", broker_lite_server.native,
                            "--metrics-port", "0", "--metrics-addr", "127.0.0.1"]) as proc:
        out, err = LineCollector(proc.stdout), LineCollector(proc.stderr)  # type: ignore[arg-type]
        wait_until(lambda: out.find("rocketbox checker ready"), timeout=30,
                   message=lambda: out.text() + "\n" + err.text())
        line = err.find("metrics on http://")
        assert line is not None
        address = line.split("metrics on ", 1)[1]
        port = address.rsplit(":", 1)[1].split("/", 1)[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            scraped = resp.read().decode()
        assert "rocketbox_outbox_up 1.0" in scraped
        assert terminate(proc) == 0


@pytest.mark.timeout(30)
def test_version_and_unknown_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("rocketbox ")
    with pytest.raises(SystemExit) as exit_info:
        main(["frobnicate"])
    assert exit_info.value.code == 2
    assert ROCKETBOX.exists()


@pytest.mark.timeout(120)
def test_relay_command_relays_a_committed_row(broker_lite_server: BrokerLiteServer,
                                              cli_db_url: str) -> None:
    """Celery on the database itself (``sqla+`` the --db URL, the default), SQLite and
    PostgreSQL: a driver-qualified URL (``postgresql+psycopg://``) once made kombu look
    for a transport named ``postgresql``."""
    from outbox.config import Outbox
    from outbox.publish import publish
    from outbox.status import read_status

    url = cli_db_url
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            publish(conn, "orders", {"n": 1}, outbox=Outbox(engine=engine))
        with rocketbox_process(["relay", "--db", url, "--broker", broker_lite_server.native,
                                "--concurrency", "1"], stdout=subprocess.DEVNULL) as proc:
            err = LineCollector(proc.stderr)  # type: ignore[arg-type]

            def relayed() -> bool:
                if proc.poll() is not None:
                    raise AssertionError("relay exited:\n" + err.text())
                status = read_status(engine)
                return status.pending == 0 and sum(
                    s.relayed_last_hour or 0 for s in status.topics) == 1

            wait_until(relayed, timeout=60, message=lambda: err.text()[-3000:])
            assert terminate(proc) == 0
    finally:
        engine.dispose()
