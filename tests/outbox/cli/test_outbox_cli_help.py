"""Every ``--help`` of ``rocketbox`` reads right: each option explained, defaults said once.

The rules: every option has help text; a default shows once, as
``(default: X)`` or in words, and never as ``(default: None)``; a flag's
help never shows a default (``--no-sweeper (default: True)`` read as if both
were on).
"""

from __future__ import annotations

import argparse
import re

import pytest

from examples.demo.run import build_parser as demo_parser
from outbox.cli import build_parser
from spark import audit_job

_DEFAULTS = re.compile(r"\(default", re.IGNORECASE)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _problems(name: str, parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    problems = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction | \
                                                   argparse._VersionAction):
            continue
        option = f"{name} {action.option_strings[-1]}"
        if not (action.help or "").strip() or action.help == argparse.SUPPRESS:
            if action.help != argparse.SUPPRESS:
                problems.append(f"{option}: no help text")
            continue
        shown = formatter._expand_help(action)
        if "(default: None)" in shown:
            problems.append(f"{option}: says (default: None)")
        if len(_DEFAULTS.findall(shown)) > 1:
            problems.append(f"{option}: default said twice: {shown!r}")
        if action.nargs == 0 and re.search(r"\(default: (True|False)\)", shown):
            problems.append(f"{option}: a flag shows its default: {shown!r}")
    return problems


@pytest.mark.timeout(60)
def test_every_help_text_reads_right() -> None:
    parsers = {f"rocketbox {name}": p for name, p in _subparsers(build_parser()).items()}
    parsers["rocketbox"] = build_parser()
    parsers["rocketbox audit"] = audit_job.build_parser()
    parsers["rocketbox demo"] = demo_parser()
    problems = [p for name, parser in parsers.items() for p in _problems(name, parser)]
    assert problems == []


def _help_of(parser: argparse.ArgumentParser, option: str) -> str:
    action = next(a for a in parser._actions if option in a.option_strings)
    return " ".join(parser._get_formatter()._expand_help(action).split())


@pytest.mark.timeout(60)
def test_the_defaults_users_asked_for_are_shown() -> None:
    audit = audit_job.build_parser()
    assert "(default: 60)" in _help_of(audit, "--grace")
    assert "default: 5)" in _help_of(audit, "--slo")
    assert "default: 600)" in _help_of(audit, "--stuck-after")
    assert "rocketbox_transaction" in _help_of(audit, "--table")
    demo = demo_parser()
    assert "(default: 200)" in _help_of(demo, "--orders")
    timeout = next(a for a in demo._actions if "--timeout" in a.option_strings)
    assert f"(default: {timeout.default})" in _help_of(demo, "--timeout")
    commands = _subparsers(build_parser())
    relay = commands["relay"]
    assert _help_of(commands["migrate"], "--revision").count("default") == 1
    assert "(default: 1)" in _help_of(relay, "--concurrency")
    sweeper = _help_of(relay, "--no-sweeper")
    assert "True" not in sweeper and "each worker runs one" in sweeper and "harmless" in sweeper
    assert "--no-beat" not in relay.format_help()  # the old name works, unlisted


@pytest.mark.timeout(60)
def test_help_never_shows_a_secret_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCKETBOX_SECRET_KEY", "s3cret-from-env")
    monkeypatch.setenv("ROCKETBOX_DB_URL", "postgresql+psycopg://app:pw-from-env@db/shop")
    for name, parser in _subparsers(build_parser()).items():
        text = parser.format_help()
        assert "s3cret-from-env" not in text and "pw-from-env" not in text, name
