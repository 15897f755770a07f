"""The shell commands a Markdown page gives, as the docs test runs them.

What counts as a shell command:

- a ```` ```console ```` block: each line starting with ``$ `` is a command; a
  command whose line ends with ``\\`` goes on over the next lines (taken
  verbatim, prompt removed from the first only); every other line up to the
  next ``$ `` line is the output the page shows for it;
- a ```` ```sh ````, ```` ```bash ```` or ```` ```shell ```` block: each line
  that is not blank and not a ``#`` comment is a command (``\\`` continues it);
  comment lines right after a command are the output the page shows for it,
  ``# `` removed;
- a fence with no language whose first line starts with ``$ `` is an error
  (:class:`UnlabelledShell`): label it ``console``.

A block is skipped when the line directly above its fence is
``<!-- not run: needs WHAT -->``; :attr:`Block.mark` keeps the text after
``not run:``, and :func:`mark_problem` says what is wrong with a mark that does
not say what the block needs.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

__all__ = ["SHELL_LANGS", "Block", "Command", "UnlabelledShell", "doc_files", "mark_problem",
           "parse"]

SHELL_LANGS = frozenset({"console", "sh", "bash", "shell"})
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
_MARK = re.compile(r"^\s*<!--\s*not run\b(?P<rest>.*?)-->\s*$")


class UnlabelledShell(ValueError):
    """A fence without a language holds ``$ `` prompts."""


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: its text as the shell gets it, where it starts, the output shown."""

    text: str
    line: int
    shown: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced shell block of a page."""

    path: Path
    line: int               # the opening fence's line, 1-based
    lang: str
    commands: tuple[Command, ...]
    mark: str | None        # the text after "not run" of the mark above it, or None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files(root: Path) -> list[Path]:
    """README.md, every docs/*.md and every examples/*/README.md, in that order."""
    found = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *sorted((root / "examples").glob("*/README.md"))]
    return [p for p in found if p.is_file()]


def mark_problem(mark: str) -> str | None:
    """What is wrong with a ``not run`` mark's text, or None when it says what is needed."""
    text = mark.strip()
    if not text.startswith(":"):
        return "a `not run` mark needs `: needs WHAT` (what the block needs to run)"
    reason = text[1:].strip()
    if not reason.startswith("needs ") or len(reason.removeprefix("needs ").strip()) < 3:
        return f"the mark says {reason!r}: write `needs` and what the block needs to run"
    return None


def _console(lines: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    text: list[str] = []
    start = 0
    shown: list[str] = []
    going_on = False
    for number, line in lines:
        if going_on:
            text.append(line)
            going_on = line.endswith("\\")
            continue
        if line.startswith("$ "):
            if text:
                commands.append(Command("\n".join(text), start, tuple(shown)))
            text, start, shown = [line[2:]], number, []
            going_on = line.endswith("\\")
        elif text and line.strip():
            shown.append(line)
    if text:
        commands.append(Command("\n".join(text), start, tuple(shown)))
    return commands


def _script(lines: list[tuple[int, str]]) -> list[Command]:
    commands: list[Command] = []
    text: list[str] = []
    start = 0
    shown: list[str] = []
    going_on = False
    after_command = False
    for number, line in lines:
        if going_on:
            text.append(line)
            going_on = line.endswith("\\")
            continue
        stripped = line.strip()
        if not stripped:
            after_command = False
            continue
        if stripped.startswith("#"):
            if text and after_command:
                shown.append(stripped.removeprefix("#").strip())
            continue
        if text:
            commands.append(Command("\n".join(text), start, tuple(shown)))
        text, start, shown = [line], number, []
        going_on = line.endswith("\\")
        after_command = True
    if text:
        commands.append(Command("\n".join(text), start, tuple(shown)))
    return commands


def parse(path: Path) -> list[Block]:
    """Every shell block of the page at ``path``, in page order.

    Raises:
        UnlabelledShell: a fence without a language holds ``$ `` prompts.
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, lang = opening["fence"], opening["lang"].lower()
        body: list[tuple[int, str]] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append((j + 1, lines[j]))
            j += 1
        above = _MARK.match(lines[i - 1]) if i > 0 else None
        mark = above["rest"] if above else None
        if lang in SHELL_LANGS:
            commands = _console(body) if lang == "console" else _script(body)
            blocks.append(Block(path, i + 1, lang, tuple(commands), mark))
        elif not lang and any(text.startswith("$ ") for _, text in body[:1]):
            raise UnlabelledShell(f"{path}:{i + 1}: a fence with `$ ` prompts and no language: "
                                  "label it ```console")
        i = j + 1
    return blocks
