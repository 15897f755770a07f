"""One error tree per package (docs/errors.md, issue 15), drawn in its errors module's docstring.

For each package the check reads every module's source, finds every exception
class defined there, imports it, and asserts that it descends from the
package's root and is drawn in the tree under its real parent. Private
control-flow signals may stay outside the tree only when the docstring lists
them as internal signals.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

#: package -> (the module whose docstring draws the tree, the root's module, the root's name)
TREES = {
    "broker_lite": ("broker_lite.errors", "broker_lite.errors", "BrokerError"),
    "outbox": ("outbox.errors", "outbox.errors", "OutboxError"),
    "integrations": ("integrations.errors", "outbox.errors", "OutboxError"),
    "spark": ("spark.errors", "spark.errors", "AuditError"),
}

_EXCEPTION_BASE = re.compile(r"(Error|Exception|Exit|Warning)$")
_NODE = re.compile(r"[├└]── (\w+)")


@dataclass(frozen=True)
class Node:
    name: str
    parent: str | None


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def exception_classes(package_dir: Path) -> dict[str, list[str]]:
    """``module -> [class name]`` of every class in the package that derives from an exception.

    Read from the source, so a module nobody imports is checked too: a class
    is an exception when a base is named like one (``...Error``,
    ``...Exception``) or is another exception class of the package.
    """
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        classes = [(n.name, [_base_name(b) for b in n.bases])
                   for n in tree.body if isinstance(n, ast.ClassDef)]
        if classes:
            found[_module_name(package_dir, path)] = classes
    known: set[str] = set()
    while True:
        grown = {name for classes in found.values() for name, bases in classes
                 if any(_EXCEPTION_BASE.search(b) or b in known for b in bases)}
        if grown <= known:
            break
        known |= grown
    return {module: [name for name, _ in classes if name in known]
            for module, classes in found.items()
            if any(name in known for name, _ in classes)}


def drawn_tree(doc: str) -> tuple[dict[str, Node], set[str]]:
    """The nodes of the tree in ``doc`` (name -> parent) and the internal signals it lists."""
    lines = doc.split("::", 1)[1].splitlines()
    body = [line for line in lines if line.strip()]
    root = body[0].split()[0]
    nodes = {root: Node(root, None)}
    stack: list[tuple[int, str]] = [(-1, root)]
    for line in body[1:]:
        match = _NODE.search(line)
        if match is None:
            continue
        column = match.start()
        while stack[-1][0] >= column:
            stack.pop()
        nodes[match.group(1)] = Node(match.group(1), stack[-1][1])
        stack.append((column, match.group(1)))
    signals: set[str] = set()
    if "Internal signals" in doc:
        signals = set(re.findall(r"``(_\w+)``", doc.split("Internal signals", 1)[1]))
    return nodes, signals


def tree_problems(package: str, tree_module: str, root_module: str, root_name: str,
                  package_dir: Path) -> list[str]:
    """What is wrong with ``package``'s error tree: one line per problem (empty: none)."""
    problems: list[str] = []
    root: type[BaseException] = getattr(importlib.import_module(root_module), root_name)
    doc = importlib.import_module(tree_module).__doc__ or ""
    nodes, signals = drawn_tree(doc)
    classes: dict[str, type[BaseException]] = {root_name: root}
    for module_name in (root_module, tree_module):
        for name, value in vars(importlib.import_module(module_name)).items():
            if isinstance(value, type) and issubclass(value, BaseException):
                classes.setdefault(name, value)
    for module_name, names in exception_classes(package_dir).items():
        module = importlib.import_module(module_name)
        for name in names:
            cls = getattr(module, name)
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                continue
            where = f"{module_name}.{name}"
            if name.startswith("_") and name in signals:
                continue
            if not issubclass(cls, root):
                problems.append(f"{where} does not descend from {root_name}")
            if name not in nodes:
                problems.append(f"{where} is not drawn in the tree of {tree_module}")
            classes[name] = cls
    for node in nodes.values():
        cls = classes.get(node.name)
        if cls is None:
            problems.append(f"{tree_module} draws {node.name}, which {package} does not define")
        elif node.parent is not None and classes.get(node.parent) not in cls.__bases__:
            problems.append(f"{tree_module} draws {node.name} under {node.parent}, but its "
                            f"bases are {[b.__name__ for b in cls.__bases__]}")
    for signal in sorted(signals - set(classes) - _defined(package_dir)):
        problems.append(f"{tree_module} lists the signal {signal}, which does not exist")
    return problems


def _defined(package_dir: Path) -> set[str]:
    return {name for names in exception_classes(package_dir).values() for name in names}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("package", sorted(TREES))
def test_every_exception_is_in_its_packages_tree(package: str) -> None:
    tree_module, root_module, root_name = TREES[package]
    problems = tree_problems(package, tree_module, root_module, root_name, REPO / package)
    assert not problems, "\n".join(problems)


@pytest.mark.timeout(60)
def test_the_check_finds_a_stray_error_and_a_wrong_drawing(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "straypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text(textwrap.dedent('''
        """Tree::

            StrayRoot
            ├── Drawn
            └── Misdrawn

        Internal signals: ``_Signal``.
        """


        class StrayRoot(Exception):
            pass


        class Drawn(StrayRoot):
            pass


        class Misdrawn(Drawn):
            pass
        '''))
    (package / "parts.py").write_text(textwrap.dedent('''
        from straypkg.errors import Drawn


        class Stray(ValueError):
            pass


        class Undrawn(Drawn):
            pass


        class _Signal(Exception):
            pass


        class NotAnError:
            pass
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        problems = tree_problems("straypkg", "straypkg.errors", "straypkg.errors", "StrayRoot",
                                 package)
    finally:
        for name in [n for n in sys.modules if n.startswith("straypkg")]:
            del sys.modules[name]
    assert sorted(problems) == sorted([
        "straypkg.parts.Stray does not descend from StrayRoot",
        "straypkg.parts.Stray is not drawn in the tree of straypkg.errors",
        "straypkg.parts.Undrawn is not drawn in the tree of straypkg.errors",
        "straypkg.errors draws Misdrawn under StrayRoot, but its bases are ['Drawn']",
    ])


def _broker_config_errors() -> list[tuple[Callable[[], Any], type[Exception], str]]:
    from broker_lite.client.config import ClientConfig
    from broker_lite.core import BrokerConfig
    from broker_lite.errors import ConfigurationError
    from broker_lite.grpc_door import GrpcDoorConfig
    from broker_lite.serving.context import ServerConfig
    from broker_lite.storage import StoreConfig

    return [
        (lambda: StoreConfig(data_dir=Path("x"), segment_size=1), ConfigurationError,
         "segment_size"),
        (lambda: BrokerConfig(store=StoreConfig(data_dir=Path("x")), default_queues=0),
         ConfigurationError, "default_queues"),
        (lambda: ServerConfig(max_inflight_per_connection=0), ConfigurationError,
         "max_inflight_per_connection"),
        (lambda: GrpcDoorConfig(producer_max_attempts=0), ConfigurationError,
         "producer_max_attempts"),
        (lambda: ClientConfig(server="nowhere"), ConfigurationError, "server"),
    ]


def _outbox_config_errors() -> list[tuple[Callable[[], Any], type[Exception], str]]:
    from sqlalchemy import create_engine

    from outbox.config import Outbox, RelaySettings
    from outbox.console.config import ConsoleConfig
    from outbox.errors import ConfigurationError
    from outbox.log_setup import configure_logging

    return [
        (lambda: RelaySettings(drain_lanes=0), ConfigurationError, "drain_lanes"),
        (lambda: Outbox(engine=create_engine("sqlite://"), max_body_size=0),
         ConfigurationError, "max_body_size"),
        (lambda: ConsoleConfig(broker="127.0.0.1:1", port=70000), ConfigurationError, "port"),
        (lambda: configure_logging("LOUD"), ConfigurationError, "log level"),
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cases", [_broker_config_errors, _outbox_config_errors],
                         ids=["broker_lite", "outbox"])
def test_config_errors_name_their_setting_and_are_still_value_errors(
        cases: Callable[[], list[tuple[Callable[[], Any], type[Exception], str]]]) -> None:
    for build, error, setting in cases():
        with pytest.raises(error) as info:
            build()
        assert isinstance(info.value, ValueError)
        assert getattr(info.value, "setting", None) == setting
        assert setting in str(info.value)
