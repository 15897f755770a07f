"""The process supervisor the demo, the tests and the benchmarks share (docs/design.md).

Not part of the installed library: it lives in the source checkout beside
``examples/``, ``tests/`` and ``bench/``, and imports nothing of rocketbox.
"""

from __future__ import annotations

from procgroup.process import ExitedEarly, NotReady, Process, ProcessError, signal_group

__all__ = ["ExitedEarly", "NotReady", "Process", "ProcessError", "signal_group"]
