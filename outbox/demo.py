"""``rocketbox demo``: run the end-to-end demo of a source checkout (``examples/demo``).

The demo is not part of the installed library: it starts the Flask shop of
``examples/`` and the Spark audit of ``spark/`` with the checkout's process
supervisor (``procgroup``). This command finds the checkout this ``outbox``
package was loaded from and replaces itself (``os.execve``, same process, so
signals and the exit status are the demo's) with ``python -m examples.demo``
there, every argument passed on. From an installed wheel, which has no
checkout, it prints one line saying what it needs and exits 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["DEMO_MODULE", "find_checkout", "main"]

DEMO_MODULE = "examples.demo"
NEEDS_CHECKOUT = ("rocketbox demo: needs a source checkout of rocketbox (it runs examples/demo "
                  "there): clone the repository and run `make demo` in it")


def find_checkout(package_dir: Path | None = None) -> Path | None:
    """The source checkout holding this ``outbox`` package, or None (an installed wheel).

    A checkout is the package's parent directory when it has ``examples/demo``,
    ``examples/flask_shop`` and ``procgroup`` beside it.
    """
    root = (package_dir or Path(__file__).resolve().parent).parent
    needed = (root / "examples" / "demo" / "__main__.py",
              root / "examples" / "flask_shop" / "run.py",
              root / "procgroup" / "__init__.py")
    return root if all(path.is_file() for path in needed) else None


def main(argv: Sequence[str] | None = None) -> int:
    """Exec the checkout's demo with ``argv``; returns 2 (one line) when there is none."""
    args = list(sys.argv[1:] if argv is None else argv)
    root = find_checkout()
    if root is None:
        print(NEEDS_CHECKOUT, file=sys.stderr)
        return 2
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", DEMO_MODULE, *args],
              {**os.environ, "PYTHONPATH": path})
