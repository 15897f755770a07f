"""``flask rocketbox``: a malformed broker fails at ``init_app``; the relay and the checker
check the database (reachable, migrated) before they start; ``--no-sweeper``."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask

from integrations.flask import Rocketbox
from integrations.flask._cli import relay_command
from outbox import ConfigurationError, migrate
from tests.support import free_port


def _app(database: str, broker: str = "127.0.0.1:10911", **config: object) -> Flask:
    app = Flask(__name__)
    app.config.update({"ROCKETBOX_DATABASE": database, "ROCKETBOX_BROKER": broker, **config})
    Rocketbox(app)
    return app


@pytest.mark.parametrize("broker, problem", [
    ("nohost", "endpoint 'nohost' has no HOST:PORT"),
    ("127.0.0.1:99999", "has no port in 1..65535"),
    ("http://x:1", "unknown scheme 'http'"),
    ("", "it is empty"),
])
@pytest.mark.timeout(30)
def test_a_malformed_broker_fails_at_init_app(broker: str, problem: str,
                                              tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ROCKETBOX_BROKER") as caught:
        _app(f"sqlite:///{tmp_path / 'app.sqlite'}", broker)
    assert problem in str(caught.value)
    assert caught.value.setting == "ROCKETBOX_BROKER"
    good = _app(f"sqlite:///{tmp_path / 'app.sqlite'}", "127.0.0.1:10911")  # the owner's app
    assert "rocketbox" in good.extensions


@pytest.mark.timeout(30)
def test_an_unknown_mode_fails_at_init_app(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ROCKETBOX_MODE = 'half-first'"):
        _app(f"sqlite:///{tmp_path / 'app.sqlite'}", ROCKETBOX_MODE="half-first")


@pytest.mark.parametrize("command", ["relay", "checker", "status"])
@pytest.mark.timeout(60)
def test_an_unmigrated_database_fails_at_start(command: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    app = _app(url, f"127.0.0.1:{free_port()}")
    result = app.test_cli_runner().invoke(args=["rocketbox", command])
    assert result.exit_code == 2, result.output
    assert result.output == (
        f"Error: ROCKETBOX_DATABASE: {url} has no rocketbox tables (rocketbox_broker_state, "
        f"rocketbox_inbox, rocketbox_transaction missing); run `flask rocketbox migrate` "
        f"first\n")
    assert app.test_cli_runner().invoke(args=["rocketbox", "migrate"]).exit_code == 0
    assert migrate.current(url) == migrate.heads()[0]


@pytest.mark.parametrize("command", ["relay", "checker", "status", "migrate"])
@pytest.mark.timeout(60)
def test_an_unreachable_database_fails_at_start(command: str) -> None:
    port = free_port()
    app = _app(f"postgresql+psycopg://app:pw@127.0.0.1:{port}/shop")
    result = app.test_cli_runner().invoke(args=["rocketbox", command])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: ROCKETBOX_DATABASE: ")
    assert result.output.endswith(f"cannot connect to postgresql+psycopg://app:***@127.0.0.1:"
                                  f"{port}/shop: connection refused\n")
    assert "broker" not in result.output


@pytest.mark.timeout(30)
def test_no_sweeper_and_its_old_name() -> None:
    def parsed(*args: str) -> object:
        return relay_command.make_context("relay", list(args)).params["sweeper"]

    assert parsed() is True
    assert parsed("--no-sweeper") is False
    assert parsed("--no-beat") is False
    help_text = relay_command.get_help(relay_command.make_context("relay", []))
    assert "--no-sweeper" in help_text and "--no-beat" not in help_text
