"""What the benchmarks' reports share: the code measured, the load, ``--cases``, the targets.

The first keys of a result document (:func:`result_head`), and text every
comparison prints or renders the same way: :func:`code_summary`
(which broker_lite was measured), :func:`load_text` (the load average at
start and end of a run), :func:`busy_warning` (the machine was already busy),
:func:`select_cases` (``--cases a,b``) and :func:`markdown_targets` (the
targets table of a README section); and for the rich output of
bench/broker.py and bench/storage.py, :func:`load_at_start`,
:func:`progress_bar` and :func:`targets_table`. :func:`announce` names the
machine at the start of a run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from _common import describe_machine, load_average, machine_summary, utc_now
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

__all__ = [
    "Cell",
    "announce",
    "busy_warning",
    "code_summary",
    "load_at_start",
    "load_text",
    "markdown_targets",
    "progress_bar",
    "result_head",
    "select_cases",
    "targets_table",
]

#: a target's ``"target"`` or ``"measured"`` value as a table cell: ``cell(target, key)``
Cell = Callable[[Mapping[str, Any], str], str]


class _Named(Protocol):
    @property
    def name(self) -> str: ...


_CaseT = TypeVar("_CaseT", bound=_Named)


def result_head(benchmark: str, code: Mapping[str, Any], machine: Mapping[str, Any],
                load_start: Sequence[float]) -> dict[str, Any]:
    """The first keys of a result document: the benchmark, when (now), the code and the
    machine measured, and the load average at start and at the end (now)."""
    return {"benchmark": benchmark, "generated_at": utc_now(), "code": code, "machine": machine,
            "load_average": {"start": load_start, "end": load_average()}}


def code_summary(code: Mapping[str, Any], measured: tuple[str, ...]) -> str:
    """``broker_lite as committed at `abc123` (--at-commit)``, or ``working tree at `abc123```
    with the uncommitted paths starting with one of ``measured`` and whether the code
    changed during the run."""
    commit = (code.get("commit") or "?")[:12]
    if code["source"] == "commit":
        return f"broker_lite as committed at `{commit}` (--at-commit)"
    dirty = [p for p in code.get("dirty_paths", []) if p.startswith(measured)]
    text = f"working tree at `{commit}`"
    if dirty:
        text += f", with uncommitted changes to {', '.join(dirty)}"
    if code.get("changed_during_run"):
        text += " (changed during the run)"
    return text


def load_text(load: Mapping[str, Sequence[float] | None]) -> str:
    """``1.2 at start, 2.3 at end (1 min, ...)`` from a result's ``load_average``."""
    start, end = load.get("start"), load.get("end")
    return (f"{start[0] if start else '?'} at start, {end[0] if end else '?'} at end "
            "(1 min, the benchmark included)")


def busy_warning(load: Sequence[float]) -> str | None:
    """What to warn of when the 1-minute load at start is over half the cores, else None."""
    if load and load[0] > 0.5 * (os.cpu_count() or 1):
        return f"load average {load[0]} at start: other work on this machine will add noise"
    return None


def select_cases(cases: list[_CaseT], names: str, *, name_known: bool = False) -> list[_CaseT]:
    """The cases named in ``names`` (comma-separated; all when empty), in their order.

    An unknown name exits with a message (naming the known ones with ``name_known``).
    """
    if not names:
        return cases
    wanted = {n.strip() for n in names.split(",") if n.strip()}
    unknown = wanted - {c.name for c in cases}
    if unknown:
        known = f"; known: {', '.join(c.name for c in cases)}" if name_known else ""
        raise SystemExit(f"unknown case(s): {', '.join(sorted(unknown))}{known}")
    return [c for c in cases if c.name in wanted]


def markdown_targets(targets: Sequence[Mapping[str, Any]], cell: Cell) -> list[str]:
    """A blank line, then the targets as a Markdown table: goal, measured, met."""
    lines = ["", "| target | goal | measured | met |", "|---|---:|---:|:---:|"]
    for t in targets:
        lines.append(f"| {t['description']} | {cell(t, 'target')} | {cell(t, 'measured')} | "
                     f"{'yes' if t['met'] else '**no**'} |")
    return lines


def load_at_start(console: Console) -> list[float]:
    """The load average now; on ``console``, a warning if the machine is already busy."""
    load = load_average()
    warning = busy_warning(load)
    if warning:
        console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    return load


def announce(name: str, data_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """The machine measured (data in ``data_dir``), announced as ``NAME benchmark on
    <machine>``: printed, or on a rich ``console`` with the name in bold."""
    machine = describe_machine(data_dir)
    if console is None:
        print(f"{name} benchmark on {machine_summary(machine)}")
    else:
        console.print(f"[bold]{name} benchmark[/] on {machine_summary(machine)}", highlight=False)
    return machine


def progress_bar(console: Console) -> Progress:
    """Spinner, description, bar, done/total and elapsed time, on ``console``."""
    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                    MofNCompleteColumn(), TimeElapsedColumn(), console=console)


def targets_table(targets: Sequence[Mapping[str, Any]], cell: Cell) -> Table:
    """The targets as a rich table: goal, measured, met (green yes or red no)."""
    table = Table(title="targets", title_justify="left")
    for col in ("target", "goal", "measured", "met"):
        table.add_column(col, justify="left" if col == "target" else "right")
    for t in targets:
        table.add_row(t["description"], cell(t, "target"), cell(t, "measured"),
                      "[green]yes[/]" if t["met"] else "[red]no[/]")
    return table
