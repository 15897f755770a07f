"""bench/broker.py ``--acl``: the same cases against a broker with an ACL and one without.

Per flush mode two brokers run side by side: one plain, one with ``--acl`` and an
account whose policy names the benchmark's topics and groups by prefix (so every
request is authorised through the policy entries and the per-account decision
cache, as in production). Each round runs every case on both, the order flipping
each round; the report is the median of the paired ratios (ACL on / ACL off
throughput), which is what issue 27 asks to stay within 5 % of 1.0.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from _broker_cases import GROUP, CaseSpec, Comparison, FlushMode, Measurement, Workload
from _broker_ours import BrokerSend, BrokerTx, Keys
from _broker_run import BROKER_TOPICS, measure_once
from _broker_servers import ServerProcess, start_broker
from _common import Samples
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

__all__ = ["AclPair", "acl_file", "acl_result", "print_acl_report", "run_acl_compare"]

KEYS: Keys = ("bench", "bench-secret")


def acl_file(path: Path) -> Path:
    """The benchmark's ACL: one account, its topics and groups granted by prefix."""
    doc = {"version": 2, "accounts": [{
        "access_key": KEYS[0], "secret_key": KEYS[1], "policies": [
            {"resource": "Topic:Bench*", "actions": ["Pub", "Sub", "Create"]},
            {"resource": f"Group:{GROUP}*", "actions": ["Pub", "Sub"]},
        ]}]}
    path.write_text(json.dumps(doc))
    return path


@dataclass(slots=True)
class AclPair:
    """One case measured with the ACL off and on."""

    spec: CaseSpec
    off: list[Measurement] = field(default_factory=list)
    on: list[Measurement] = field(default_factory=list)

    def ratios(self) -> Samples:
        """Paired throughput ratios, ACL on / ACL off (off seconds / on seconds)."""
        return Samples([o.seconds / n.seconds for o, n in zip(self.off, self.on, strict=True)])


def _workload(spec: CaseSpec, address: str, keys: Keys) -> Workload:
    topic = f"{BROKER_TOPICS[spec.kind]}_{spec.name.replace('-', '_')}"
    if spec.kind == "send":
        return BrokerSend(address, spec, topic, keys=keys)
    if spec.kind == "tx":
        return BrokerTx(address, spec, topic, keys=keys)
    raise ValueError(f"--acl measures sends and transactions, not {spec.name!r}")


@contextlib.contextmanager
def _brokers(root: Path, flush: FlushMode) -> Iterator[tuple[tuple[ServerProcess, str],
                                                            tuple[ServerProcess, str]]]:
    plain = start_broker(root, flush)
    try:
        secured = start_broker(root, flush, extra=["--acl", str(acl_file(root / "acl.json"))],
                               label="-acl")
        try:
            yield plain, secured
        finally:
            secured[0].stop()
    finally:
        plain[0].stop()


def run_acl_compare(root: Path, cases: Sequence[Comparison], repeat: int,
                    progress: Progress, task: object) -> list[AclPair]:
    """``repeat`` rounds of each send/tx case on both brokers, the order flipping."""
    pairs: list[AclPair] = []
    modes: list[FlushMode] = ["async", "sync"]
    for flush in modes:
        mode = [AclPair(c.spec) for c in cases if c.spec.flush == flush
                and c.spec.kind in ("send", "tx")]
        if not mode:
            continue
        with _brokers(root, flush) as (plain, secured):
            for rep in range(repeat):
                for pair in mode:
                    order = ("off", "on") if rep % 2 == 0 else ("on", "off")
                    for label in order:
                        progress.update(task,  # type: ignore[arg-type]
                                        description=f"[{rep + 1}/{repeat}] {pair.spec.name} "
                                                    f"ACL {label}")
                        server, address = plain if label == "off" else secured
                        keys: Keys = (None, None) if label == "off" else KEYS
                        sample = measure_once(_workload(pair.spec, address, keys), server)
                        (pair.off if label == "off" else pair.on).append(sample)
                        progress.advance(task)  # type: ignore[arg-type]
        pairs += mode
    return pairs


def print_acl_report(console: Console, pairs: Sequence[AclPair]) -> None:
    table = Table(title="ACL on / ACL off (same run, paired rounds; 1.00 = no cost)")
    for column in ("case", "off msg/s", "on msg/s", "on/off (median)", "spread",
                   "broker CPU us/msg off", "on"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for pair in pairs:
        count = pair.spec.count
        off = count / Samples([s.seconds for s in pair.off]).median
        on = count / Samples([s.seconds for s in pair.on]).median
        ratios = pair.ratios()
        cpu_off = Samples([s.server_cpu / count * 1e6 for s in pair.off]).median
        cpu_on = Samples([s.server_cpu / count * 1e6 for s in pair.on]).median
        table.add_row(pair.spec.name, f"{off:,.0f}", f"{on:,.0f}", f"{ratios.median:.3f}",
                      f"±{ratios.spread:.3f}", f"{cpu_off:.1f}", f"{cpu_on:.1f}")
    console.print(table)


def acl_result(pairs: Sequence[AclPair]) -> list[dict[str, object]]:
    """Each case's figures, as ``results/broker-acl.json`` keeps them (medians, paired ratios)."""
    rows: list[dict[str, object]] = []
    for pair in pairs:
        count = pair.spec.count
        ratios = pair.ratios()
        rows.append({
            "case": pair.spec.name, "messages": count, "rounds": len(pair.off),
            "off_per_s": round(count / Samples([s.seconds for s in pair.off]).median, 1),
            "on_per_s": round(count / Samples([s.seconds for s in pair.on]).median, 1),
            "on_over_off_median": round(ratios.median, 4),
            "on_over_off_spread": round(ratios.spread, 4),
            "on_over_off_each": [round(r, 4) for r in ratios.values],
            "broker_cpu_us_per_msg_off": round(
                Samples([s.server_cpu / count * 1e6 for s in pair.off]).median, 2),
            "broker_cpu_us_per_msg_on": round(
                Samples([s.server_cpu / count * 1e6 for s in pair.on]).median, 2),
        })
    return rows
