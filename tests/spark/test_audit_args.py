"""Arguments are checked before Spark starts; a JDBC failure names its cause.

The argument checks run the job in a child process and ask it afterwards
whether PySpark ever launched its JVM gateway: the error must come without it,
and without a line of Spark's output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark.audit_job import main as audit_main
from tests.spark.audit_probe import probe
from tests.spark.audit_seed import sqlite_engine, write_status
from tests.support import PostgresServer

pytestmark = pytest.mark.spark



@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    """A SQLite status table and a broker data dir that would both be fine."""
    engine = sqlite_engine(tmp_path / "status.sqlite")
    write_status(engine, [])
    engine.dispose()
    (tmp_path / "broker" / "commitlog").mkdir(parents=True)
    (tmp_path / "not-a-broker").mkdir()
    (tmp_path / "not-a-broker" / "notes.txt").write_text("x")
    return {"url": f"jdbc:sqlite:{tmp_path / 'status.sqlite'}",
            "commitlog": str(tmp_path / "broker"), "tmp": str(tmp_path)}


_CASES: dict[str, tuple[dict[str, str], list[str], str]] = {
    # case: (argument overrides, extra args, what the one line must say)
    "unsupported": ({"url": "mysql://localhost/db"}, [], "--jdbc-url: 'mysql://localhost/db' "
                    "is neither jdbc:postgresql://"),
    "sqlalchemy_url": ({"url": "postgresql+psycopg://app:s3cret@127.0.0.1:5432/app"}, [],
                       "for PostgreSQL write jdbc:postgresql://127.0.0.1:5432/app"),
    "pg_form": ({"url": "jdbc:postgresql:/127.0.0.1:5432/app"}, [],
                "--jdbc-url: 'jdbc:postgresql:/127.0.0.1:5432/app' is not a PostgreSQL JDBC URL"),
    "pg_port": ({"url": "jdbc:postgresql://127.0.0.1:54x2/app"}, [], "--jdbc-url"),
    "sqlite_missing": ({"url": "jdbc:sqlite:/nonexistent/outbox.sqlite"}, [],
                       "--jdbc-url: no SQLite database at /nonexistent/outbox.sqlite"),
    "commitlog_missing": ({"commitlog": "{tmp}/missing"}, [],
                          "--commitlog: no such directory: {tmp}/missing"),
    "commitlog_not_broker": ({"commitlog": "{tmp}/not-a-broker"}, [],
                             "--commitlog: {tmp}/not-a-broker is not a broker data directory"),
    "partitions": ({}, ["--partitions", "0"], "--partitions"),
    "json_is_dir": ({}, ["--json", "{tmp}"], "--json: {tmp} is a directory"),
}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("case", sorted(_CASES))
def test_audit_bad_argument_exits_2_before_spark_starts(inputs: dict[str, str],
                                                        case: str) -> None:
    overrides, extra, expected = _CASES[case]
    given = {**inputs, **{k: v.format(**inputs) for k, v in overrides.items()}}
    done = probe("--jdbc-url", given["url"], "--commitlog", given["commitlog"], "--quiet",
                  *(a.format(**inputs) for a in extra))
    assert done.returncode == 2, done.stderr
    assert done.stdout == "gateway: None\n"  # PySpark never launched its JVM
    lines = done.stderr.splitlines()  # one line, and none of Spark's
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rocketbox audit: ")
    assert expected.format(**inputs) in lines[0]
    assert "s3cret" not in lines[0]  # a password in a URL is never echoed


def _pg_url(db: PostgresServer, dbname: str) -> str:
    return f"jdbc:postgresql://{db.host}:{db.port}/{dbname}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("case", ["unknown_database", "unknown_role"])
def test_audit_jdbc_failure_names_the_cause(spark_session: Any, postgres_server: PostgresServer,
                                            tmp_path: Path, case: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broker" / "commitlog").mkdir(parents=True)
    dbname, user = {"unknown_database": ("no_such_db", postgres_server.user),
                    "unknown_role": (postgres_server.dbname, "no_such_role")}[case]
    code = audit_main(["--jdbc-url", _pg_url(postgres_server, dbname), "--user", user,
                       "--commitlog", str(tmp_path / "broker"), "--quiet"])
    assert code == 2
    mine = [line for line in capsys.readouterr().err.splitlines()
            if line.startswith("rocketbox audit:")]
    assert len(mine) == 1
    expected = {"unknown_database": 'FATAL: database "no_such_db" does not exist',
                "unknown_role": 'FATAL: role "no_such_role" does not exist'}[case]
    assert expected in mine[0]
    assert "SQLSTATE" not in mine[0]
