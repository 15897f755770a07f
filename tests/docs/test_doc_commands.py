"""Every shell command in README.md, docs/*.md and examples/*/README.md runs verbatim.

For each page (found anew each run, so a new docs/*.md is picked up), the
test copies the checkout's tracked files to a fresh folder, links the venv
the tests run in as its ``.venv`` (what ``make venv`` leaves) and feeds the
page's commands, in page order, to one bash process there
(:mod:`doc_session`). Each command must exit 0, and where the page shows
output, each shown line must appear in the command's output (``...`` stands
for anything). Read-only commands (``status``, a SELECT) are run again until
their output matches, with a deadline, as a reader would look again.

Long-running commands (a broker, a relay, a web app) are recognised by
:data:`LONG_RUNNING`: one the page runs in its own terminal is started in the
background with its own log; one the page ends with ``&`` runs as written.
Either way the test waits for its ready line (in the page's log file when the
page redirects it) before the next command, and stops them all at the end.
A command matching neither table fails the test as unclassified: add it to a
table, or mark its block ``<!-- not run: needs WHAT -->``. A mark without
``needs`` and a reason fails too.

Substitutions: none to the commands, and no server of the suite is used
(the examples' PostgreSQL + Redis blocks are marked; ``tests/examples/`` runs
those setups). The environment stands in for
``make venv``: the venv's ``bin`` first on PATH and ``PYTHONPATH`` set to the
copy (the editable install's path), ``TMPDIR`` inside the test's folder (the
README's ``mktemp -d``); ``SHOP_*``, ``ROCKETBOX_*``, ``FLASK_*`` and
``DJANGO_*`` variables of the caller are removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.doc_blocks import Block, Command, doc_files, mark_problem, parse
from tests.docs.doc_session import Finished, ShellSession, alive
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)

#: seconds a foreground command may take (a migration on a busy two-core machine)
COMMAND_TIMEOUT = 180.0
#: seconds a long-running command gets to print its ready line
READY_TIMEOUT = 180.0
#: seconds a read-only command is retried until it shows the page's output
SETTLE_TIMEOUT = 90.0
#: seconds to wait for a port a page's command binds to be free
PORT_TIMEOUT = 60.0


@dataclass(frozen=True)
class LongRunning:
    name: str
    command: re.Pattern[str]
    ready: re.Pattern[str]


def _long(name: str, command: str, ready: str) -> LongRunning:
    return LongRunning(name, re.compile(command), re.compile(ready, re.MULTILINE))


#: commands that run until stopped, and the line that says each is ready
LONG_RUNNING = (
    _long("broker", r"^(broker-lite|python -m broker_lite) serve\b", r"^broker_lite ready "),
    _long("relay", r"(\brocketbox relay|\brocketbox_relay|\.run relay)\b",
          r"\bcelery@\S+ ready\."),
    _long("checker", r"(\brocketbox checker|\brocketbox_checker|\.run checker)\b",
          r"checker ready"),
    _long("inventory", r"(\.run inventory|\.manage inventory)\b", r"^inventory ready"),
    _long("web", r"(\.run web|\.manage serve)\b", r"^shop ready http"),
    _long("flask web", r"^flask --app \S+ run\b", r"Running on http"),
    _long("console", r"^rocketbox console\b", r"rocketbox console ready"),
)

#: commands that end by themselves (matched on the words after NAME=value assignments)
SHORT = tuple(re.compile(p) for p in (
    r"^(export|cd|mkdir|kill|echo|curl|sqlite3)\b",
    r"^(\.|source) \S*activate$",
    r"^python -c\b",
    r"^python -m examples\.\w+\.(run|manage) (migrate|check|rocketbox_status|createsuperuser)\b",
    r"^(rocketbox|python -m outbox) (migrate|status|replay|retention)\b",
    r"^flask --app \S+ rocketbox (status|migrate)\b",
    r"^(broker-lite|python -m broker_lite) (topic|inspect|send|acl)\b",
))

#: read-only commands: run again until they show the page's output
SETTLES = tuple(re.compile(p) for p in (
    r"\b(rocketbox status|rocketbox_status)\b", r"^sqlite3\b", r"^python -c .*\bselect\b",
))

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_REDIRECT = re.compile(r"^\d*>>?|^&>|^<")


def words(text: str) -> tuple[list[str], bool]:
    """The words (assignments, redirections, ``&`` dropped); whether it ends in ``&``."""
    try:
        tokens = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError:
        tokens = text.split()
    background = bool(tokens) and tokens[-1] == "&"
    kept: list[str] = []
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if token == "&":
            continue
        if _REDIRECT.match(token):
            skip_next = token in (">", ">>", "<", "&>", "2>", "1>")
            continue
        if not kept and _ASSIGNMENT.match(token):
            continue
        kept.append(token)
    return kept, background


def classify(text: str) -> tuple[LongRunning | None, bool]:
    """(the long-running kind or None for a short command, whether the page backgrounds it).

    Raises:
        AssertionError: neither table knows the command.
    """
    kept, background = words(text)
    line = " ".join(kept)
    for kind in LONG_RUNNING:
        if kind.command.search(line):
            return kind, background
    if any(p.search(line) for p in SHORT) and not background:
        return None, False
    raise AssertionError(f"cannot classify {text!r}: add it to LONG_RUNNING or SHORT in "
                         f"{Path(__file__).name}, or mark its block `<!-- not run: needs "
                         "WHAT -->`")


def redirect_target(text: str) -> str | None:
    """Where the page sends a command's stdout (``> FILE``), if anywhere."""
    match = re.search(r"(?<![\d&])>\s*(?!&)(\S+)", text)
    return match[1] if match else None


def ports(text: str) -> list[int]:
    return [int(p) for p in re.findall(r"--port[ =](\d+)", text) if int(p)]


def shown_matches(shown: tuple[str, ...], output: str) -> list[str]:
    """The shown lines missing from ``output``.

    ``...`` matches anything (a line of only ``...``: lines left out); runs of
    blanks compare equal whatever their length (a table's column widths).
    """
    lines = [_blanks(line) for line in output.splitlines()]
    missing = []
    for want in shown:
        if want.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in _blanks(want).split("...")))
        if not any(pattern.fullmatch(line) for line in lines):
            missing.append(want)
    return missing


def _blanks(line: str) -> str:
    return " ".join(line.split())


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pages() -> list[Path]:
    return [p.relative_to(ROOT) for p in doc_files(ROOT)]


def fresh_checkout(dest: Path) -> Path:
    """The tracked files of the checkout (as they are in its work tree), with a .venv link."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                            capture_output=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(VENV, target_is_directory=True)
    return dest


def session_env(checkout: Path, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SHOP_", "ROCKETBOX_", "FLASK_", "DJANGO_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    env["PYTHONPATH"] = str(checkout)
    env["TMPDIR"] = str(tmp)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class PageRun:
    """Runs one page's blocks in a session, and says where a failure was."""

    def __init__(self, session: ShellSession) -> None:
        self.session = session
        self.jobs: list[tuple[str, int]] = []
        self.last_pid: int | None = None

    def command(self, block: Block, command: Command) -> None:
        where = f"{block.path}:{command.line}"
        kind, paged_background = classify(command.text)
        for port in ports(command.text) if kind is not None else ():
            wait_until(lambda p=port: port_free(p), timeout=PORT_TIMEOUT,  # type: ignore[misc]
                       message=f"{where}: port {port} stays in use by another process")
        background = kind is not None and not paged_background
        settles = kind is None and any(p.search(" ".join(words(command.text)[0]))
                                       for p in SETTLES)
        last: list[tuple[Finished, list[str]]] = []

        def attempt() -> bool:
            done = self.session.run(command.text, timeout=COMMAND_TIMEOUT, background=background)
            assert done.status == 0, (f"{where}: {command.text!r} exited {done.status}; "
                                      f"its output:\n{done.output[-4000:]}")
            last.append((done, shown_matches(command.shown, done.output) if kind is None else []))
            return not last[-1][1]

        def unseen() -> str:
            done, missing = last[-1]
            return (f"{where}: {command.text!r} did not show {missing}; it printed:\n"
                    f"{done.output[-4000:]}")

        if settles:  # a reader looks again until the page's output is there
            wait_until(attempt, timeout=SETTLE_TIMEOUT, interval=0.5, message=unseen)
        else:
            assert attempt(), unseen()
        done = last[-1][0]
        if kind is None:
            return
        pid = done.job_pid
        assert pid is not None and pid != self.last_pid, f"{where}: no job started"
        self.last_pid = pid
        if background:
            log = self.session.work / f"step-{self.session.steps}.out"
        else:
            target = redirect_target(command.text)
            assert target is not None, (f"{where}: {command.text!r} runs in the background "
                                        "without a log file to read its ready line from")
            log = done.cwd / target

        def ready() -> bool:
            text = log.read_text(errors="replace") if log.exists() else ""
            if kind.ready.search(text):
                return True
            if not alive(pid):
                raise AssertionError(f"{where}: {kind.name} ({command.text!r}) ended before "
                                     f"it was ready; its log:\n{text[-4000:]}")
            return False

        wait_until(ready, timeout=READY_TIMEOUT, interval=0.1,
                   message=lambda: f"{where}: {kind.name} not ready ({kind.ready.pattern}); "
                                   f"its log:\n{_tail(log)}")
        self.jobs.append((kind.name, pid))


def _tail(path: Path) -> str:
    with contextlib.suppress(FileNotFoundError):
        return path.read_text(errors="replace")[-4000:]
    return ""


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Path]:
    yield fresh_checkout(tmp_path / "checkout")


def _expensive(page: Path) -> bool:
    return any(b.mark is None and b.commands for b in parse(ROOT / page))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("page", pages(), ids=str)
def test_marks_say_what_the_block_needs(page: Path) -> None:
    problems = [f"{b.where}: {problem}" for b in parse(ROOT / page)
                if b.mark is not None and (problem := mark_problem(b.mark))]
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("page", pages(), ids=str)
def test_every_command_is_classified(page: Path) -> None:
    unknown = []
    for block in parse(ROOT / page):
        if block.mark is not None:
            continue
        for command in block.commands:
            try:
                classify(command.text)
            except AssertionError as exc:
                unknown.append(f"{block.path}:{command.line}: {exc}")
    assert not unknown, "\n".join(unknown)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", [p for p in pages() if _expensive(p)], ids=str)
def test_page_commands_run_verbatim(page: Path, checkout: Path, tmp_path: Path) -> None:
    blocks = [b for b in parse(ROOT / page) if b.mark is None]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with ShellSession(tmp_path / "session", checkout, session_env(checkout, tmp)) as session:
        run = PageRun(session)
        for block in blocks:
            for command in block.commands:
                run.command(block, command)
