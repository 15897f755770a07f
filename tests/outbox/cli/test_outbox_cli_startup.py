"""``rocketbox relay`` and ``rocketbox checker`` check the database before they start: it
answers, and holds rocketbox's tables at the Alembic head; otherwise one line naming
``--db``, exit 2, and no worker ever says "ready"."""

from __future__ import annotations

from pathlib import Path

import pytest

from outbox import migrate
from tests.outbox.cli.cli_process_support import run_rocketbox
from tests.support import free_port


def _no_ready(stdout: str, stderr: str) -> None:
    assert "ready" not in stdout and "ready" not in stderr


@pytest.mark.parametrize("command", ["relay", "checker"])
@pytest.mark.timeout(120)
def test_an_unmigrated_database_fails_at_start(command: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    done = run_rocketbox([command, "--db", url, "--broker", f"127.0.0.1:{free_port()}"],
                         timeout=90)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"rocketbox {command}: --db: {url} has no rocketbox tables (rocketbox_broker_state, "
        f"rocketbox_inbox, rocketbox_transaction missing); run `rocketbox migrate --db URL` "
        f"first\n")
    _no_ready(done.stdout, done.stderr)


@pytest.mark.timeout(120)
def test_a_database_behind_the_head_fails_at_start(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    migrate.upgrade(url, "0002")
    done = run_rocketbox(["relay", "--db", url, "--broker", f"127.0.0.1:{free_port()}"],
                         timeout=90)
    assert done.returncode == 2, done.stderr
    head = ", ".join(migrate.heads())
    assert done.stderr == (f"rocketbox relay: --db: {url} is at rocketbox migration 0002, this "
                           f"rocketbox needs {head}; run `rocketbox migrate --db URL`\n")
    migrate.upgrade(url)  # what the line says to do, and then the check passes
    assert migrate.current(url) == head


@pytest.mark.parametrize("command", ["relay", "checker"])
@pytest.mark.timeout(120)
def test_an_unreachable_database_fails_at_start(command: str) -> None:
    port = free_port()
    url = f"postgresql+psycopg://app:pw@127.0.0.1:{port}/shop"
    done = run_rocketbox([command, "--db", url], timeout=90)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"rocketbox {command}: cannot connect to "
                           f"postgresql+psycopg://app:***@127.0.0.1:{port}/shop: "
                           f"connection refused\n")
    _no_ready(done.stdout, done.stderr)
