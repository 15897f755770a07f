"""bench/relay.py ``--profile``: where our relay worker and broker_lite spend a throughput run.

py-spy samples both processes (GIL-holding samples only: the interpreter's
CPU, not a thread waiting on a socket) during the timed part of each of our
throughput runs; :func:`print_profile` prints, per process, the share of
each layer (:data:`WORKER_LAYERS`, broker_lite's from bench/broker.py) and
the functions with the most own and inclusive time, over all the runs.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import _pyspy as pyspy
from _broker_profile import LAYERS as BROKER_LAYERS

__all__ = ["WORKER_LAYERS", "Profiler", "print_profile"]

#: own time per layer of the relay worker, by the path of the innermost frame; first match
WORKER_LAYERS: list[tuple[str, Sequence[str]]] = [
    ("relay pass (outbox/relay.py)", ("outbox/relay.py",)),
    ("claim (outbox/claims.py)", ("outbox/claims.py",)),
    ("targets, runner (outbox/targets/)", ("outbox/targets/",)),
    ("outbox, other", ("outbox/",)),
    ("broker_lite client", ("broker_lite/",)),
    ("SQLAlchemy", ("sqlalchemy/",)),
    ("psycopg", ("psycopg/", "psycopg_c/", "psycopg_pool/")),
    ("Celery, kombu, redis", ("celery/", "kombu/", "billiard/", "vine/", "redis/")),
    ("metrics, tracing", ("prometheus_client/", "opentelemetry/")),
    ("asyncio, sockets", ("asyncio/", "selectors.py", "socket.py", "ssl.py")),
    ("threads, futures", ("threading.py", "queue.py", "concurrent/")),
    ("logging", ("logging/",)),
]


class Profiler:
    """Samples ``pids`` (name: pid) around each run it wraps; keeps every run's stacks."""

    def __init__(self, out_dir: Path, pids: Callable[[], dict[str, int]]) -> None:
        self.out_dir = out_dir
        self._pids = pids
        self.stacks: dict[str, pyspy.Stacks] = {}
        self.runs = 0
        out_dir.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        """Sample every process while the block runs, then add their stacks to the totals."""
        self.runs += 1
        paths = {name: self.out_dir / f"{name}-{self.runs}.txt" for name in self._pids()}
        with contextlib.ExitStack() as stack:
            for name, pid in self._pids().items():
                stack.enter_context(pyspy.record(pid, paths[name]))
            yield
        for name, path in paths.items():
            self.stacks.setdefault(name, Counter()).update(pyspy.read_raw(path))

    def summary(self, top: int = 14) -> dict[str, Any]:
        """Per process: samples, the layers' shares, the top functions (own, inclusive)."""
        out: dict[str, Any] = {}
        for name, stacks in self.stacks.items():
            layers = WORKER_LAYERS if name == "worker" else BROKER_LAYERS
            out[name] = {**pyspy.by_function(stacks, top),
                         "layers": pyspy.by_layer(stacks, layers)}
        return out


def print_profile(summary: dict[str, Any], runs: int, say: Callable[[str], None]) -> None:
    for name, data in summary.items():
        say(f"profile of the {name} over {runs} throughput run(s): {data['samples']} samples "
            "holding the GIL; own time by layer: "
            + ", ".join(f"{layer} {100 * share:.0f}%" for layer, share in data["layers"]))
        say("  own time:")
        for function, share in data["own"]:
            say(f"    {100 * share:5.1f}%  {function}")
        say("  inclusive time:")
        for function, share in data["inclusive"]:
            say(f"    {100 * share:5.1f}%  {function}")
