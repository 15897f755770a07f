"""The server fixtures and helpers in tests/support work against real servers."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import psycopg
import pytest
import redis
import sqlalchemy

from tests.support import (
    PostgresServer,
    ServerStartError,
    WaitTimeout,
    free_port,
    start_broker_lite,
    wait_until,
)


@pytest.mark.timeout(90)
def test_postgres_fixture_runs_sql(postgres_server: PostgresServer, postgres_url: str) -> None:
    assert postgres_url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
    with psycopg.connect(postgres_server.libpq_url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        conn.execute("CREATE TABLE fixture_probe (id serial PRIMARY KEY, note text NOT NULL)")
        conn.execute("INSERT INTO fixture_probe (note) VALUES ('hello'), ('world')")
        rows = conn.execute("SELECT note FROM fixture_probe ORDER BY id").fetchall()
        assert rows == [("hello",), ("world",)]
        conn.rollback()


@pytest.mark.timeout(90)
def test_postgres_url_works_with_sqlalchemy(postgres_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            version = conn.execute(sqlalchemy.text("SHOW server_version")).scalar_one()
    finally:
        engine.dispose()
    assert int(str(version).split(".")[0]) >= 15


@pytest.mark.timeout(90)
def test_postgres_create_database(postgres_server: PostgresServer) -> None:
    other = postgres_server.create_database("fixture_probe_db")
    assert other.url.endswith("/fixture_probe_db")
    with psycopg.connect(other.libpq_url) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("fixture_probe_db",)


@pytest.mark.timeout(30)
def test_redis_fixture_set_get(redis_url: str) -> None:
    assert redis_url.startswith("redis://127.0.0.1:")
    assert not redis_url.startswith("redis://127.0.0.1:6379/")
    with redis.Redis.from_url(redis_url) as client:
        assert client.set("fixture:probe", "value") is True
        assert client.get("fixture:probe") == b"value"


@pytest.mark.timeout(10)
def test_markers_follow_fixtures(request: pytest.FixtureRequest, redis_url: str) -> None:
    assert request.node.get_closest_marker("redis") is not None
    assert request.node.get_closest_marker("postgres") is None


@pytest.mark.timeout(10)
def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@pytest.mark.timeout(10)
def test_wait_until_returns_first_truthy_value() -> None:
    calls: list[int] = []

    def third_time() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert wait_until(third_time, timeout=5, interval=0.001) == 3


@pytest.mark.timeout(10)
def test_wait_until_times_out_with_message_and_last_error() -> None:
    def refuses() -> bool:
        raise ConnectionRefusedError("nobody home")

    with pytest.raises(WaitTimeout, match=r"server never came up.*nobody home") as info:
        wait_until(
            refuses,
            timeout=0.05,
            interval=0.01,
            message="server never came up",
            ignore=(ConnectionError,),
        )
    assert isinstance(info.value.__cause__, ConnectionRefusedError)


@pytest.mark.timeout(10)
def test_wait_until_lets_other_errors_through() -> None:
    def broken() -> bool:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        wait_until(broken, timeout=5, ignore=(ConnectionError,))


# A stand-in for ``python -m broker_lite`` that honours the ready-line contract:
# it prints the line, then blocks until SIGTERM and exits 0.
_FAKE_BROKER = (
    "import signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
    "print('starting', sys.argv[1:], flush=True)\n"
    "print('broker_lite ready native=127.0.0.1:10911 grpc=127.0.0.1:8081', flush=True)\n"
    "signal.sigwait({signal.SIGTERM})\n"
)


@pytest.mark.timeout(30)
def test_start_broker_lite_reads_ready_line_and_stops(tmp_path: Path) -> None:
    command = [sys.executable, "-c", _FAKE_BROKER]
    with start_broker_lite(tmp_path / "data", ["--flush", "sync"], command=command) as server:
        assert (server.native, server.grpc) == ("127.0.0.1:10911", "127.0.0.1:8081")
        assert server.data_dir == (tmp_path / "data").resolve()
        assert "--flush" in server.stdout_lines[0]
        assert server.process.poll() is None
        assert server.stop(signal.SIGTERM) == 0
    assert server.process.returncode == 0


@pytest.mark.timeout(30)
def test_start_broker_lite_reports_stderr_when_process_dies(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; sys.exit('cannot open commit log')"]
    with (
        pytest.raises(ServerStartError, match=r"exited with 1(.|\n)*cannot open commit log"),
        start_broker_lite(tmp_path / "data", command=command),
    ):
        pass
