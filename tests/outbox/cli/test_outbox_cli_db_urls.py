"""``--db`` takes an async URL (its sync twin does the work) and refuses other databases in
one line (exit 2), as docs/outbox.md promises."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect

from outbox.cli import main
from tests.outbox.cli.cli_process_support import run_rocketbox
from tests.support import PostgresServer


def _async(url: str) -> str:
    return url.replace("+psycopg:", "+asyncpg:", 1)


@pytest.mark.postgres
@pytest.mark.timeout(90)
def test_migrate_and_status_take_an_asyncpg_url(postgres_server: PostgresServer,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    sync = postgres_server.create_database("cli_asyncpg").url
    assert "+psycopg:" in sync
    url = _async(sync)
    assert main(["migrate", "--db", url]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.endswith(": empty -> 0007\n")
    engine = create_engine(sync)
    try:
        assert "rocketbox_transaction" in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert main(["status", "--db", url, "--json"]) == 0
    assert '"pending": 0' in capsys.readouterr().out


@pytest.mark.timeout(60)
def test_an_aiosqlite_url_migrates_the_same_file(tmp_path: object,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = f"{tmp_path}/async.sqlite"
    assert main(["migrate", "--db", f"sqlite+aiosqlite:///{path}"]) == 0
    assert main(["migrate", "--db", f"sqlite:///{path}", "--current"]) == 0
    assert capsys.readouterr().out.endswith("0007\n")


@pytest.mark.parametrize("url", ["mysql://app:pw@127.0.0.1:1/shop",
                                 "mysql+pymysql://app:pw@127.0.0.1:1/shop",
                                 "mssql+pyodbc://app:pw@127.0.0.1:1/shop"])
@pytest.mark.timeout(60)
def test_another_database_is_one_line_and_exit_2(url: str) -> None:
    for command in (["migrate"], ["migrate", "--sql"], ["status"], ["relay"]):
        done = run_rocketbox([*command, "--db", url])
        assert done.returncode == 2, done.stderr
        backend = url.split(":")[0].split("+")[0]
        shown = url.replace(":pw@", ":***@")
        assert done.stderr == (f"rocketbox {command[0]}: --db: rocketbox supports PostgreSQL "
                               f"and SQLite, not {backend!r} ({shown})\n")
