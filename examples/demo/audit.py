"""What ``rocketbox demo`` checks and reports: the SQL audit and the summary table.

:func:`audit` checks the invariant (docs/design.md) in SQL over the demo's
files: every committed status row has exactly one commit record in the
broker, no record mentions a rolled-back order, and the inventory reserved
every committed order once and nothing else. Each divergence is one
transaction (or order) in one category, so the demo's last line counts
transactions, not kinds of problem.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from outbox.targets.base import TX_ID_PROPERTY

__all__ = ["BASE_SLO", "Audit", "Outcome", "audit", "exported_records", "print_spark",
           "print_summary", "query", "spark_available"]

#: the commit-to-broker latency the Spark audit allows a transaction, on top of the demo's
#: kill period (its kills and restarts, see ``RelaySupervisor.kill_period``)
BASE_SLO = 5.0

#: the Debian package of the SQLite JDBC driver the Spark audit reads the demo's database with
SQLITE_JDBC_PACKAGE = "libxerial-sqlite-jdbc-java"

#: where the broker keeps halves (RocketMQ's name; broker_lite's store uses it too)
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


@dataclass
class Audit:
    """What the audit found; a divergence is one transaction (or order) in one category."""

    committed_rows: int = 0
    broker_commits: int = 0
    #: halves never committed (RocketMQ's model: a half a kill left open is sent again by
    #: the next relay and the old one rolled back by check-back; broker_lite de-duplicates)
    uncommitted_halves: int = 0
    consumed: int = 0
    #: category -> how many transactions (or orders) diverge that way
    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    #: one line per divergent transaction (the Spark audit's: one per category)
    lines: list[str] = field(default_factory=list)

    def diverged(self, category: str, line: str, count: int = 1) -> None:
        self.counts[category] += count
        self.lines.append(line)

    @property
    def divergences(self) -> int:
        """Divergent transactions, not categories."""
        return sum(self.counts.values())


def query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        return list(conn.execute(sql))


def broker_records(data_dir: Path) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "broker_lite", "inspect", "--data-dir",
                          str(data_dir)], capture_output=True, text=True, timeout=120,
                         check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def row_tx_id(record: dict[str, Any]) -> str:
    """The status row a broker record belongs to.

    The relay sets the row's ``tx_id`` as the ``ROCKETBOX_TX_ID`` property on
    every message. On broker_lite's native door it is also the transaction id;
    through a RocketMQ proxy the transaction id is the client's, one per half.
    """
    props = record.get("properties") or {}
    return str(props.get(TX_ID_PROPERTY) or record["transaction_id"])


def exported_records(export: Path) -> list[dict[str, Any]]:
    """A broker export's messages as :func:`broker_records` gives commit records (a target
    without a commit log, RabbitMQ: docs/rabbitmq.md)."""
    from outbox.broker_export import read_export

    return [{"sysflag": "commit", "transaction_id": m.tx_id, "topic": m.destination,
             "properties": {TX_ID_PROPERTY: m.tx_id}, "keys": ""} for m in read_export(export)]


def audit(work: Path, ok_refs: set[str], failed_refs: set[str], *,
          records: list[dict[str, Any]] | None = None) -> Audit:
    """The invariant (docs/design.md), checked in SQL over the shop, broker and inventory.

    ``records``: the broker's, when not broker_lite's log in ``work/broker`` (NATS: one
    commit record per stored message, from its export)."""
    result = Audit()
    rows = dict(query(work / "shop.sqlite", "SELECT tx_id, keys FROM rocketbox_transaction "
                                              "WHERE state = 'COMMIT'"))
    orders = {ref for (ref,) in query(work / "shop.sqlite", "SELECT ref FROM shop_order")}
    result.committed_rows = len(rows)
    if records is None:
        records = broker_records(work / "broker")
    commits = collections.Counter(row_tx_id(r) for r in records if r["sysflag"] == "commit")
    result.broker_commits = sum(commits.values())
    committed_halves = {r["transaction_id"] for r in records if r["sysflag"] == "commit"}
    result.uncommitted_halves = len({r["transaction_id"] for r in records  # not the renewed
                                     if r["topic"] == HALF_TOPIC  # copies a check re-puts
                                     and r["transaction_id"] not in committed_halves})
    for tx_id in rows:
        if commits[tx_id] == 0:
            result.diverged("lost", f"lost: {tx_id} committed in the DB, not in the broker")
        elif commits[tx_id] > 1:
            result.diverged("duplicate", f"duplicate: {tx_id} committed {commits[tx_id]} "
                                         "times")
    for tx_id in sorted(set(commits) - set(rows)):
        result.diverged("phantom", f"phantom: {tx_id} committed in the broker, not in the DB")
    for ref in sorted(orders ^ ok_refs):
        result.diverged("orders table", f"orders table: {ref} " + (
            "stored without a 201 answer" if ref in orders else "answered 201, not stored"))
    for ref in sorted(set(rows.values()) ^ ok_refs):
        result.diverged("status rows", f"status rows: order {ref} " + (
            "answered 201, has no COMMIT row" if ref in ok_refs else
            "has a COMMIT row, was not answered 201"))
    mentioned = {key for r in records for key in str(r.get("keys") or "").split()}
    for ref in sorted(failed_refs & (mentioned | orders)):
        result.diverged("rolled back", f"rolled back order {ref} reached the broker or the DB")
    reserved = dict(query(work / "inventory.sqlite",
                           "SELECT tx_id, order_ref FROM inventory_reservation"))
    result.consumed = len(reserved)
    for tx_id in sorted(set(reserved) ^ set(rows)):
        result.diverged("inventory", f"inventory: {tx_id} " + (
            "consumed, not committed" if tx_id in reserved else "committed, not consumed"))
    return result


def spark_available() -> str | None:
    """Why the Spark audit cannot run here, or None when it can."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    try:
        if importlib.util.find_spec("spark.audit_job") is None:
            return "spark.audit_job is missing"
    except ModuleNotFoundError:
        return "the spark package is missing"
    if shutil.which("java") is None:
        return "java is not on PATH"
    from spark.session import DEFAULT_JARS

    sqlite_jar = next(j for j in DEFAULT_JARS if "sqlite" in j)
    if not Path(sqlite_jar).is_file():
        return (f"the SQLite JDBC driver {sqlite_jar} is missing: install it with "
                f"`apt-get install -y {SQLITE_JDBC_PACKAGE}` (as root; or `make system-deps`)")
    return None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the kills did, for the summary."""

    kills: int
    #: ``crash-`` orders in the batches the hook killed (its marker files; one kill can
    #: hold several)
    crash_orders: int
    #: commits the broker's check-back made: every half of a killed batch, crash- or not
    checkbacks: int
    downtime: float
    longest: float
    kill_period: float
    slo: float


def print_summary(console: Console, orders: int, answers: collections.Counter[str],
                  result: Audit, outcome: Outcome, timings: dict[str, float]) -> None:
    table = Table(title="rocketbox demo")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("orders sent", str(orders))
    table.add_row("  201 created (committed)", str(answers["201"]))
    table.add_row("  422 unknown item (rolled back)", str(answers["422"]))
    table.add_row("  409 too many (rolled back)", str(answers["409"]))
    table.add_row("status rows (COMMIT)", str(result.committed_rows))
    table.add_row("broker commit records", str(result.broker_commits))
    table.add_row("  ended by the relay", str(result.broker_commits - outcome.checkbacks))
    table.add_row("  committed by check-back (halves a kill left open)",
                  str(outcome.checkbacks))
    if result.uncommitted_halves:
        table.add_row("  halves a kill left open, sent again: the old one rolled back",
                      str(result.uncommitted_halves))
    table.add_row("relay kills (between half and commit)", str(outcome.kills))
    table.add_row("  crash- orders in the killed batches", str(outcome.crash_orders))
    table.add_row("  relay down (restarts), in all", f"{outcome.downtime:.1f}s")
    table.add_row("  longest outage", f"{outcome.longest:.1f}s")
    table.add_row("  kill period (first kill to last restart)", f"{outcome.kill_period:.1f}s")
    table.add_row(f"latency SLO ({BASE_SLO:.0f}s + kill period)", f"{outcome.slo:.1f}s")
    table.add_row("consumed by inventory (inbox)", str(result.consumed))
    colour = "green" if not result.divergences else "red"
    table.add_row("divergences (transactions)", f"[{colour}]{result.divergences}[/{colour}]")
    for category, count in sorted(result.counts.items()):
        table.add_row(f"  {category}", f"[red]{count}[/red]")
    table.add_section()
    for name, seconds in timings.items():
        table.add_row(f"time: {name}", f"{seconds:.1f}s")
    console.print(table)


def print_spark(console: Console, result: str, again: str) -> None:
    """What the Spark audit said, and the command that judges the same again (when it ran).

    Each is one line whatever the terminal's width (a path or a command to copy is
    never wrapped or cut), and printed as is (no markup read in paths).
    """
    console.print(f"Spark audit: {result}", soft_wrap=True, markup=False, highlight=False)
    if again:
        console.print(f"audit it again: {again}", soft_wrap=True, markup=False,
                      highlight=False)
