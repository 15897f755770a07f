"""The import-linter contracts in pyproject.toml hold, and they catch a bad import.

``make lint`` runs ``lint-imports``; this test proves the contracts are not
vacuous: a copy of the packages with one deliberately bad import added fails
them, naming the import, while the untouched copy passes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ["broker_lite", "outbox", "integrations", "spark", "migrations", "procgroup"]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(),
                                reason="import-linter is not installed (the dev extra)")


def _copy_tree(dest: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=240, check=False)


@pytest.mark.timeout(300)
def test_the_untouched_tree_keeps_every_contract(tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("module", "bad_import", "named"), [
    # a lower layer reaching up
    ("broker_lite/storage/_bad.py", "from broker_lite.server import NativeServer",
     "broker_lite.storage._bad -> broker_lite.server"),
    # the core taking the native protocol's structs (listed as an exception until issue 15)
    ("broker_lite/core/_bad.py", "from broker_lite.protocol import messages",
     "broker_lite.core._bad -> broker_lite.protocol.messages"),
    # one door leaning on the other
    ("broker_lite/grpc_door/_bad.py", "from broker_lite.server import handlers",
     "broker_lite.grpc_door._bad -> broker_lite.server"),
    # the client loading the storage engine (its names come from broker_lite.values)
    ("broker_lite/client/_bad.py", "from broker_lite.storage.properties import TAGS",
     "broker_lite.client._bad -> broker_lite.storage"),
    # the leaf values reaching up into the core
    ("broker_lite/values/_bad.py", "from broker_lite.core import Broker",
     "broker_lite.values._bad -> broker_lite.core"),
    # storage doing network I/O
    ("broker_lite/storage/_bad.py", "import asyncio", "broker_lite.storage._bad -> asyncio"),
    # the outbox past the client's public API
    ("outbox/_bad.py", "from broker_lite.core import Broker", "outbox._bad -> broker_lite.core"),
    # the outbox past the client's public names, into its plumbing
    ("outbox/_bad.py", "from broker_lite.client.loop_thread import LoopThread",
     "outbox._bad -> broker_lite.client.loop_thread"),
    # ... which the contract named module by module, and missed this one
    ("outbox/_bad.py", "from broker_lite.client.async_client import AsyncClient",
     "outbox._bad -> broker_lite.client.async_client"),
    # an integration around the outbox
    ("integrations/_bad.py", "import broker_lite.client", "integrations._bad -> broker_lite"),
    # the library leaning on the checkout's process supervisor (not in the wheel)
    ("outbox/_bad.py", "from procgroup import Process", "outbox._bad -> procgroup"),
    # the supervisor leaning on the library
    ("procgroup/_bad.py", "import outbox", "procgroup._bad -> outbox"),
])
def test_a_deliberately_bad_import_breaks_a_contract(tmp_path: Path, module: str,
                                                     bad_import: str, named: str) -> None:
    tree = _copy_tree(tmp_path)
    (tree / module).write_text(f"from __future__ import annotations\n\n{bad_import}\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert named in result.stdout, result.stdout


@pytest.mark.timeout(300)
def test_a_new_client_module_is_behind_the_public_api_without_listing_it(
        tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path)
    (tree / "broker_lite/client/fresh_part.py").write_text(
        "from __future__ import annotations\n\nVALUE = 1\n")
    (tree / "outbox/_bad.py").write_text(
        "from __future__ import annotations\n\nfrom broker_lite.client.fresh_part import VALUE\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "outbox._bad -> broker_lite.client.fresh_part" in result.stdout, result.stdout


@pytest.mark.timeout(120)
def test_the_layer_picture_in_the_docs_is_drawn_from_todays_code() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "layers.py"), "--check"],
                            capture_output=True, text=True, timeout=110, check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.timeout(120)
def test_importing_the_client_loads_no_storage_engine() -> None:
    code = ("import sys, broker_lite.client, broker_lite.client.limits\n"
            "print(sorted(m for m in sys.modules if m.startswith('broker_lite.storage')\n"
            "             or m in {'mmap', 'zlib_ng'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=110, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
