"""``manage.py rocketbox_relay`` and ``rocketbox_checker`` check the outbox's database
(reachable, migrated) before they start, naming the setting; ``--no-sweeper``."""

from __future__ import annotations

# configures Django before the imports below
from tests.integrations.django import django_site  # noqa: F401

# isort: split

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test.utils import override_settings

from integrations.django.conf import reset
from integrations.django.management.commands.rocketbox_relay import Command as RelayCommand
from outbox import migrate
from tests.support import free_port


@pytest.fixture(autouse=True)
def _fresh_state() -> Iterator[None]:
    reset()
    yield
    reset()


@pytest.mark.parametrize("command", ["rocketbox_relay", "rocketbox_checker"])
@pytest.mark.timeout(60)
def test_an_unmigrated_database_fails_at_start(command: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    with override_settings(ROCKETBOX={"DATABASE_URL": url, "BROKER": f"127.0.0.1:{free_port()}",
                                      "CELERY_BROKER": f"sqla+sqlite:///{tmp_path / 'c.db'}"}), \
            pytest.raises(CommandError) as caught:
        call_command(command)
    assert caught.value.returncode == 2
    assert str(caught.value) == (
        f"ROCKETBOX['DATABASE_URL']: {url} has no rocketbox tables (rocketbox_broker_state, "
        f"rocketbox_inbox, rocketbox_transaction missing); run `manage.py migrate rocketbox` "
        f"first")


@pytest.mark.parametrize("command", ["rocketbox_relay", "rocketbox_checker"])
@pytest.mark.timeout(60)
def test_an_unreachable_database_fails_at_start_and_is_not_blamed_on_the_broker(
        command: str, tmp_path: Path) -> None:
    port = free_port()
    url = f"postgresql+psycopg://app:pw@127.0.0.1:{port}/shop"
    with override_settings(ROCKETBOX={"DATABASE_URL": url,
                                      "CELERY_BROKER": f"sqla+sqlite:///{tmp_path / 'c.db'}"}), \
            pytest.raises(CommandError) as caught:
        call_command(command)
    assert caught.value.returncode == 2
    assert str(caught.value) == (
        f"ROCKETBOX['DATABASE_URL']: the database does not answer: cannot connect to "
        f"postgresql+psycopg://app:***@127.0.0.1:{port}/shop: connection refused")


@pytest.mark.timeout(60)
def test_a_database_behind_the_head_names_the_alias(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    migrate.upgrade(url, "0003")
    with override_settings(ROCKETBOX={"DATABASE_URL": url, "CELERY_BROKER": ""}), \
            pytest.raises(CommandError, match=r"is at rocketbox migration 0003, this "
                                              r"rocketbox needs 0007; run `manage.py "
                                              r"migrate rocketbox`"):
        call_command("rocketbox_checker")


@pytest.mark.timeout(30)
def test_no_sweeper_and_its_old_name() -> None:
    parser = RelayCommand().create_parser("manage.py", "rocketbox_relay")
    assert parser.parse_args([]).sweeper is True
    assert parser.parse_args(["--no-sweeper"]).sweeper is False
    assert parser.parse_args(["--no-beat"]).sweeper is False
    assert "--no-sweeper" in parser.format_help() and "--no-beat" not in parser.format_help()


@pytest.mark.parametrize("command", ["rocketbox_relay", "rocketbox_checker"])
@pytest.mark.timeout(60)
def test_a_malformed_broker_is_one_line_naming_it(command: str) -> None:
    with override_settings(ROCKETBOX={"BROKER": "nowhere", "CELERY_BROKER": ""}), \
            pytest.raises(CommandError) as caught:
        call_command(command)
    assert caught.value.returncode == 2
    assert str(caught.value).startswith("ROCKETBOX['BROKER'] = 'nowhere': endpoint 'nowhere' "
                                        "has no HOST:PORT")
