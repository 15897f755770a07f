"""``examples/flask_shop/commands.run_part``: the one dispatch both shops' ``run`` use.

The shops' own tests run every part through it as a subprocess; this pins its
two rules in-process: the part the command names runs (its status is the
exit status), and a setting a part cannot start with is one line and 2.
"""

from __future__ import annotations

import argparse

import pytest

from examples.flask_shop.commands import COMMANDS, Part, run_part, shop_parser
from outbox.errors import ConfigurationError

PROG = "python -m examples.test_shop.run"


def _bad_setting(args: argparse.Namespace) -> int:
    raise ConfigurationError("SHOP_BROKER = 'nowhere': no HOST:PORT", setting="SHOP_BROKER")


@pytest.mark.timeout(30)
def test_the_part_the_command_names_runs_and_its_status_is_returned() -> None:
    parser, _ = shop_parser(PROG)
    ran: list[str] = []

    def part(name: str, status: int) -> Part:
        def run(args: argparse.Namespace) -> int:
            ran.append(f"{name} {getattr(args, 'port', '')}".strip())
            return status
        return run

    parts = {name: part(name, status) for status, name in enumerate(COMMANDS)}
    for status, name in enumerate(COMMANDS):
        argv = [name, "--port", "8123"] if name == "web" else [name]
        assert run_part(PROG, parser.parse_args(argv), parts) == status
    assert ran == ["migrate", "web 8123", "relay", "checker", "inventory"]


@pytest.mark.timeout(30)
def test_a_setting_a_part_cannot_start_with_is_one_line_and_status_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser, _ = shop_parser(PROG)
    served: list[str] = []

    def web(args: argparse.Namespace) -> int:
        served.append(args.host)
        return 0

    parts: dict[str, Part] = {"relay": _bad_setting, "web": web}
    assert run_part(PROG, parser.parse_args(["relay"]), parts) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{PROG} relay: SHOP_BROKER = 'nowhere': no HOST:PORT")
    assert err.count("\n") == 1
    assert run_part(PROG, parser.parse_args(["web"]), parts) == 0  # the others still run
    assert served == ["127.0.0.1"]
