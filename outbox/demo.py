"""``rocketbox demo``: run the end-to-end demo of a source checkout (``examples/demo``).

The demo is not part of the installed library: it starts the Flask shop of
``examples/`` and the Spark audit of ``spark/`` with the checkout's process
supervisor (``procgroup``). This command finds the checkout this ``outbox``
package was loaded from and runs ``python -m examples.demo`` there as a child
(every argument passed on; its exit status is the command's, 128 + N when
signal N killed it). A SIGTERM sent
to this process is passed on to the demo, which stops its parts; Ctrl-C
reaches the demo from the terminal by itself, so this process only waits for
it. From an installed wheel, which has no checkout, it prints one line saying
what it needs and exits 2.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


@contextmanager
def _passing_signals_to(child: subprocess.Popen[bytes]) -> Iterator[None]:
    """SIGTERM goes on to ``child``; SIGINT is ignored here (the terminal sent it to both)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM,
                                              lambda signum, _frame: child.send_signal(signum)),
                signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checkout's demo with ``argv``; 2 (one line) when there is no checkout."""
    args = list(sys.argv[1:] if argv is None else argv)
    root = find_checkout()
    if root is None:
        print(NEEDS_CHECKOUT, file=sys.stderr)
        return 2
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH", "")]))
    sys.stdout.flush()
    child = subprocess.Popen([sys.executable, "-m", DEMO_MODULE, *args],
                             env={**os.environ, "PYTHONPATH": path})
    with _passing_signals_to(child):
        code = child.wait()
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell says
