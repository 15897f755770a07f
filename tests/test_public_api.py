"""Every package re-exports its public names (docs/design.md §1): ``__all__`` is real, complete."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = [
    "broker_lite",
    "broker_lite.storage",
    "broker_lite.protocol",
    "broker_lite.core",
    "broker_lite.client",
    "broker_lite.server",
    "broker_lite.serving",
    "broker_lite.runtime",
    "broker_lite.grpc_door",
    "outbox",
    "integrations.flask",
    "integrations.django",
    "integrations.fastapi",
    "spark",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_only_real_names_without_repeats(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what the package lacks: {missing}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", PACKAGES)
def test_public_classes_and_functions_defined_in_the_package_are_exported(name: str) -> None:
    """A public class or function a package imports from its own modules is in ``__all__``."""
    module = importlib.import_module(name)
    exported = set(module.__all__)
    hidden = sorted(
        attr for attr, value in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith(name + ".")
        and attr not in exported
    )
    assert not hidden, f"{name} imports public names it does not export: {hidden}"


@pytest.mark.timeout(60)
def test_importing_spark_loads_neither_pyspark_nor_py4j() -> None:
    import subprocess
    import sys

    code = ("import sys, spark; sys.exit(1 if {'pyspark', 'py4j'} & set(sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=60).returncode == 0


@pytest.mark.timeout(60)
def test_importing_outbox_does_not_import_celery() -> None:
    import subprocess
    import sys

    code = "import sys, outbox; sys.exit(1 if 'celery' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=60).returncode == 0
