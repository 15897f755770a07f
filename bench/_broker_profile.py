"""bench/broker.py ``--profile``: one more run of ours per case, sampled by py-spy.

py-spy samples the broker process and the load generator (this process)
during the timed part of a run scaled up :data:`PROFILE_SCALE` times;
:func:`print_profile` prints the functions with the most own and inclusive
time, and the share of each layer of broker_lite (:data:`LAYERS`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import _pyspy as pyspy
from _broker_cases import Comparison, console
from _broker_run import broker_workload, measure_once
from _broker_servers import Servers
from rich.table import Table

__all__ = ["LAYERS", "PROFILE_SCALE", "print_profile", "run_profiles"]

#: own time per layer, by the path of the innermost frame (py-spy shortens paths to
#: the package part); first match wins
LAYERS: list[tuple[str, Sequence[str]]] = [
    ("storage", ("broker_lite/storage/",)),
    ("core: transactions", ("broker_lite/core/transactions.py",
                            "broker_lite/core/transaction_records.py")),
    ("core: broker, topics", ("broker_lite/core/",)),
    ("protocol", ("broker_lite/protocol/",)),
    ("server", ("broker_lite/server/", "broker_lite/serving/", "broker_lite/runtime/")),
    ("client", ("broker_lite/client/",)),
    ("asyncio, sockets", ("asyncio/", "selectors.py", "socket.py")),
    ("load generator", ("bench/", "broker.py", "_broker_", "redis/")),
]
#: profiled runs do this many times the work of a measured run (enough samples)
PROFILE_SCALE = 3


def run_profiles(pair: Servers, cases: Sequence[Comparison], out_dir: Path,
                 top: int = 16) -> dict[str, Any]:
    """One extra run of ours per case, py-spy sampling the broker process and this one
    (GIL-holding samples only) during the timed part."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for case in cases:
        spec = case.spec
        if spec.kind != "consume":  # consume reads what was preloaded: no more
            spec = dataclasses.replace(spec, count=spec.count * PROFILE_SCALE)
        server_out = out_dir / f"{spec.name}-server.txt"
        client_out = out_dir / f"{spec.name}-client.txt"

        @contextlib.contextmanager
        def sampling(server_out: Path = server_out,
                     client_out: Path = client_out) -> Iterator[None]:
            with pyspy.record(pair.broker.pid, server_out), \
                    pyspy.record(os.getpid(), client_out):
                yield

        sample = measure_once(broker_workload(spec, pair), pair.broker, around_load=sampling)
        profile: dict[str, Any] = {"count": spec.count, "seconds": sample.seconds,
                                   "server_cpu_s": sample.server_cpu,
                                   "client_cpu_s": sample.client_cpu}
        for side, path in (("server", server_out), ("client", client_out)):
            stacks = pyspy.read_raw(path)
            profile[side] = {**pyspy.by_function(stacks, top),
                             "layers": pyspy.by_layer(stacks, LAYERS), "file": str(path)}
        results[spec.name] = profile
        print_profile(spec.name, profile)
    return results


def print_profile(name: str, prof: dict[str, Any]) -> None:
    count = prof["count"]
    console.rule(f"profile: {name}, {count / prof['seconds']:,.0f}/s under py-spy; CPU per "
                 f"message: broker {prof['server_cpu_s'] / count * 1e6:.1f} us, load "
                 f"generator {prof['client_cpu_s'] / count * 1e6:.1f} us")
    for side in ("server", "client"):
        data = prof[side]
        layers = ", ".join(f"{layer} {100 * share:.0f}%" for layer, share in data["layers"])
        table = Table(title=f"{name}, {'broker' if side == 'server' else 'load generator'}: "
                            f"{data['samples']} samples holding the GIL; by layer: {layers}",
                      title_justify="left")
        table.add_column("own %", justify="right")
        table.add_column("function (own time)")
        table.add_column("incl %", justify="right")
        table.add_column("function (inclusive)")
        own, incl = data["own"], data["inclusive"]
        for i in range(max(len(own), len(incl))):
            o = own[i] if i < len(own) else ("", 0.0)
            c = incl[i] if i < len(incl) else ("", 0.0)
            table.add_row(f"{100 * o[1]:.1f}" if o[0] else "", o[0],
                          f"{100 * c[1]:.1f}" if c[0] else "", c[0])
        console.print(table)
