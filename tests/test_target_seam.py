"""Nothing outside ``outbox/targets/`` asks which broker it is (docs/targets.md).

A lint-time test over the source (no broker, no database): in ``outbox``,
``integrations`` and ``migrations``, outside ``outbox/targets/``,

* no module imports a broker's client (``rocketmq``, ``broker_lite.client``,
  ``broker_lite.errors``) nor a target's own module (``outbox.targets.X``
  other than the seam's neutral ``base``, ``runner``, ``address`` and
  ``choose``), except the imports :data:`ALLOWED` lists, each with its reason;
* no code branches on the kind of broker: no ``is_rocketmq``, no
  ``target_address.kind``, no comparison with (or ``startswith`` of) a target's
  scheme or kind name. This has no allowlist.

``make lint`` runs it; so does ``make test``. The second test proves the scan
is not vacuous: each kind of branch, planted in a module, is found.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("outbox", "integrations", "migrations")
SEAM = Path("outbox/targets")
#: modules of the seam anyone may import: they name no broker
NEUTRAL = frozenset({"outbox.targets", "outbox.targets.base", "outbox.targets.runner",
                     "outbox.targets.address", "outbox.targets.choose"})
#: the brokers' own packages: only targets import them
CLIENTS = ("rocketmq", "broker_lite.client", "broker_lite.errors", "grpc")
#: words that name a kind of broker, in a comparison or a startswith
KIND_WORDS = ("rocketmq", "broker-lite", "broker_lite", "nats", "amqp", "rabbitmq")

#: (file or package prefix, imported module prefix) -> why it is not a broker branch
ALLOWED: dict[tuple[str, str], str] = {
    ("outbox/__init__.py", "outbox.targets.broker_lite"):
        "re-exports BrokerLitePublisher, a public name of the default target",
    ("outbox/checkback_runner.py", "outbox.targets.broker_lite_checkback"):
        "re-exports broker_lite's CheckbackResponder, StatusTableListener and answer_check "
        "under their old public names; run_checker itself asks the registry",
    ("outbox/half_first.py", "broker_lite.client"):
        "the seed API: send_in_transaction takes broker_lite's TransactionProducer and "
        "Message, SqlStatusListener is its listener; Outbox refuses mode half_first on any "
        "target that does not list it (KindTraits.modes)",
    ("outbox/half_first.py", "outbox.targets.broker_lite"):
        "the seed API sends and ends through ProducerSeam, the target's face for it",
    ("outbox/half_first.py", "outbox.targets.broker_lite_checkback"):
        "SqlStatusListener answers broker_lite's check-backs by the shared rule set",
    ("outbox/inbox.py", "broker_lite.client"):
        "InboxConsumer is a consumer over broker_lite's PushConsumer, not a target; the "
        "address it consumes from comes from BrokerAddress.native_door",
    ("outbox/validation.py", "broker_lite.client"):
        "publish() checks a row against the native protocol's limits (topic names, "
        "property sizes) before any target is chosen",
    ("outbox/validation.py", "broker_lite.errors"):
        "its InvalidMessageError is the limits' error, turned into the outbox's",
    ("outbox/console/", "broker_lite.client"):
        "the console shows broker_lite's own state through its Admin API (docs/console.md)",
    ("outbox/console/", "broker_lite.errors"):
        "the console's sampler reports broker_lite's Admin errors",
}


@dataclass(frozen=True, slots=True)
class Finding:
    path: str
    line: int
    what: str
    imported: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # ``from outbox.targets import rocketmq`` names a target's module too
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                         if node.module == "outbox.targets"
                         and (ROOT / SEAM / f"{alias.name}.py").exists())
    return found


def _names_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)
            and any(word in node.value.lower() for word in KIND_WORDS))


def _branches(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "is_rocketmq":
            found.append((node.lineno, "asks is_rocketmq"))
        elif (isinstance(node, ast.Attribute) and node.attr in ("kind", "traits")
              and isinstance(node.value, ast.Attribute) and node.value.attr == "target_address"):
            found.append((node.lineno, f"reads target_address.{node.attr}"))
        elif isinstance(node, ast.Compare) and any(
                _names_kind(side) for side in (node.left, *node.comparators)):
            found.append((node.lineno, "compares with a broker's scheme or kind"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith")
              and any(_names_kind(arg) for arg in node.args)):
            found.append((node.lineno, f"{node.func.attr} a broker's scheme or kind"))
    return found


def _target_specific(module: str) -> bool:
    if module in NEUTRAL:
        return False
    if module.startswith("outbox.targets."):
        return True
    return any(module == client or module.startswith(client + ".") for client in CLIENTS)


def scan(path: str, source: str) -> list[Finding]:
    """What in ``source`` (the file at ``path``, relative to the root) asks which broker."""
    tree = ast.parse(source, filename=path)
    findings = [Finding(path, line, f"imports {module}", module)
                for line, module in _imports(tree) if _target_specific(module)]
    findings += [Finding(path, line, what) for line, what in _branches(tree)]
    return findings


def _allowed(finding: Finding) -> tuple[str, str] | None:
    if finding.imported is None:
        return None
    for where, prefix in ALLOWED:
        if (finding.path == where or (where.endswith("/") and finding.path.startswith(where))) \
                and (finding.imported == prefix or finding.imported.startswith(prefix + ".")):
            return where, prefix
    return None


def _sources() -> list[Path]:
    files = [p for package in SCANNED for p in sorted((ROOT / package).rglob("*.py"))]
    return [p for p in files if not p.relative_to(ROOT).is_relative_to(SEAM)]


@pytest.mark.timeout(120)
def test_nothing_outside_the_targets_asks_which_broker() -> None:
    findings: list[Finding] = []
    used: set[tuple[str, str]] = set()
    sources = _sources()
    assert len(sources) > 50  # the scan found the packages
    for path in sources:
        rel = path.relative_to(ROOT).as_posix()
        for finding in scan(rel, path.read_text(encoding="utf-8")):
            entry = _allowed(finding)
            if entry is None:
                findings.append(finding)
            else:
                used.add(entry)
    assert not findings, ("broker-specific code outside outbox/targets/ (move it behind the "
                          "seam, or list it in ALLOWED with its reason):\n"
                          + "\n".join(map(str, findings)))
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED lists imports that no longer exist: {stale}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("source", "what"), [
    ("if outbox.target_address.is_rocketmq:\n    pass\n", "asks is_rocketmq"),
    ("kind = outbox.target_address.kind\n", "reads target_address.kind"),
    ("if address.kind == 'rocketmq':\n    pass\n", "compares with a broker's scheme or kind"),
    ("ok = outbox.broker.startswith('rocketmqs://')\n", "startswith a broker's scheme or kind"),
    ("if 'nats' in scheme:\n    pass\n", "compares with a broker's scheme or kind"),
    ("from rocketmq import Producer\n", "imports rocketmq"),
    ("import broker_lite.client\n", "imports broker_lite.client"),
    ("from outbox.targets import rocketmq\n", "imports outbox.targets.rocketmq"),
    ("from outbox.targets.rocketmq_responder import RocketMQResponder\n",
     "imports outbox.targets.rocketmq_responder"),
    # an allowlisted file may not pick up a new target-specific import
    ("from outbox.targets.rocketmq import probe\n", "imports outbox.targets.rocketmq"),
])
def test_a_planted_broker_branch_is_found(source: str, what: str) -> None:
    # planted in a module with no allowance, and in one with allowances of its own
    for path in ("outbox/relay.py", "outbox/half_first.py"):
        findings = scan(path, "from __future__ import annotations\n" + source)
        if path == "outbox/half_first.py" and "broker_lite.client" in source:
            continue  # the seed API's own allowance
        assert [f for f in findings if f.what == what and _allowed(f) is None], findings


@pytest.mark.timeout(60)
def test_the_seam_itself_and_neutral_imports_are_not_findings() -> None:
    assert scan("outbox/relay.py", "from outbox.targets.base import TxEnd\n"
                                   "from outbox.targets.choose import publisher_for\n"
                                   "p = publisher_for(outbox)\n") == []
