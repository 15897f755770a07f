"""The packages' import graph has no circle, and tests import their helpers as packages.

A circle, even one dodged by importing inside a function, means two modules
that cannot be read, loaded or tested apart: grimp (which import-linter is
built on) sees function-level and ``TYPE_CHECKING`` imports too, so a dodge
is caught like a plain circle. Break one with a module both sides import, or
by registration. ``make lint`` runs import-linter; this test runs in the suite.

The second test holds tests/README.md's rule: every helper under ``tests/``
is imported by its package path (``tests.support...``), never as a top-level
name such as ``support`` that only works with ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker_lite", "outbox", "integrations", "spark", "migrations", "procgroup")


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(
                        child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.timeout(120)
def test_no_import_circle_among_the_packages() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert circles(graph) == []


@pytest.mark.timeout(120)
def test_the_check_finds_a_circle_dodged_inside_a_function() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    graph.add_import(importer="outbox.config", imported="outbox.relay", line_number=1,
                     line_contents="    from outbox.relay import Relay  # in a function")
    assert any({"outbox.config", "outbox.relay"} <= set(c) for c in circles(graph))


def _local_top_level_names() -> set[str]:
    """The names of helpers under tests/ that import only with a tests/ directory on
    ``sys.path`` (``support``, ``grpc_support``; not ``http`` or ``celery``, which are
    other modules' names)."""
    names = {p.stem for p in (ROOT / "tests").rglob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in (ROOT / "tests").rglob("*") if p.is_dir()}
    return {name for name in names - {"__pycache__"}
            if name.isidentifier() and importlib.util.find_spec(name) is None}


@pytest.mark.timeout(120)
def test_tests_and_bench_import_helpers_by_package_path() -> None:
    local = _local_top_level_names()
    wrong = []
    for path in [*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] in local and name.split(".")[0] not in PACKAGES]
    assert wrong == [], "import these as tests.<path> (tests/README.md)"
