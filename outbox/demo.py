"""``rocketbox demo`` / ``make demo``: the whole path end to end, on embedded defaults.

On a fresh checkout it needs nothing but the virtualenv: SQLite for the
databases, broker_lite started here, and Celery on kombu's SQLAlchemy
transport (a SQLite file). In ``.demo/`` (wiped first, so it runs again) it

1. starts broker_lite (fast check-back: ``--tx-timeout 1``), migrates the
   shop's and the inventory's databases, and starts the check-back
   responder, the inventory consumer (inbox), the relay worker (Celery, with
   the demo's crash hook) and the Flask shop on a free port;
2. sends ``--orders`` orders over HTTP with a progress bar: most succeed,
   some fail and roll back (an unknown item answers 422, too many items 409),
   and for a few the relay kills itself between the half and the commit
   (the shop's ``relay --demo-crash-dir`` hook), so the broker's check-back
   has to resolve them; a killed relay is restarted;
3. waits until the inventory has consumed every committed order;
4. audits: every committed status row has exactly one commit record in the
   broker (``broker-lite inspect``), no record mentions a rolled-back order,
   the inventory reserved every committed order once and nothing else; then,
   when pyspark and Java are there (not with ``--quick`` unless ``--spark
   on``), the Spark audit ``spark.audit_job`` over the same files;
5. prints a summary table and, last, one line
   ``demo: committed=C rolled_back=R consumed=C divergences=0``.

Every process runs in its own process group and is stopped with SIGTERM,
then SIGKILL. Exit status 0 when the audit found no divergence, 1 otherwise,
2 when the demo could not run.

The parts live in ``examples/flask_shop`` (they are started as
subprocesses, so this module imports nothing above the outbox layer).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = ["DemoError", "main"]

REPO = Path(__file__).resolve().parents[1]
SHOP = "examples.flask_shop.run"
_READY = re.compile(r"broker_lite ready native=(\S+) grpc=(\S+)")


class DemoError(Exception):
    """The demo could not run (a part did not start, or took too long)."""


# -- processes ---------------------------------------------------------------------------


@dataclass
class Part:
    """One subprocess of the demo, in its own process group, logging to a file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.argv, env=self.env, cwd=REPO, stdout=log,
                                            stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    def log(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float) -> re.Match[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        match: list[re.Match[str]] = []

        def seen() -> bool:
            found = regex.search(self.log())
            if found:
                match.append(found)
                return True
            if not self.alive():
                raise DemoError(f"{self.name} exited early:\n{self.log()[-3000:]}")
            return False

        poll(seen, timeout, f"{self.name} did not start:\n" + "{log}",
             lambda: self.log()[-3000:])
        return match[0]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the group, SIGKILL after ``timeout`` (and for any straggler)."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout)


def poll(predicate: Callable[[], bool], timeout: float, message: str,
         detail: Callable[[], str] = lambda: "") -> None:
    """Wait for ``predicate`` (checked every 50 ms) or raise :class:`DemoError`."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise DemoError(message.replace("{log}", detail()))
        pause.wait(0.05)


# -- orders ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Order:
    ref: str
    item: str
    qty: int
    kind: str  # "ok", "crash" (the relay dies between half and commit), "unknown", "too_many"


def plan(count: int) -> list[Order]:
    """A fixed mix: about 80 % plain, 4 % relay crashes, the rest rolled back."""
    orders = []
    items = ("tea", "coffee", "cake", "scone")
    for i in range(count):
        if i % 25 == 7:
            kind, item, qty = "crash", items[i % 4], 1 + i % 5
        elif i % 13 == 5:
            kind, item, qty = "unknown", "unicorn", 1
        elif i % 11 == 3:
            kind, item, qty = "too_many", items[i % 4], 99
        else:
            kind, item, qty = "ok", items[i % 4], 1 + i % 5
        prefix = "crash-" if kind == "crash" else "order-"
        orders.append(Order(f"{prefix}{uuid.uuid4().hex[:12]}", item, qty, kind))
    return orders


def post(address: str, order: Order) -> tuple[int, dict[str, Any]]:
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = json.dumps({"ref": order.ref, "item": order.item, "qty": order.qty})
        conn.request("POST", "/orders", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        raw = response.read()
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            data = {"raw": raw.decode("utf-8", "replace")}
        return response.status, data
    finally:
        conn.close()


# -- the audit -----------------------------------------------------------------------------


@dataclass
class Audit:
    committed_rows: int = 0
    broker_commits: int = 0
    consumed: int = 0
    divergences: list[str] = field(default_factory=list)


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn:
        return list(conn.execute(sql))


def broker_records(data_dir: Path) -> list[dict[str, Any]]:
    out = subprocess.run([sys.executable, "-m", "broker_lite", "inspect", "--data-dir",
                          str(data_dir)], capture_output=True, text=True, timeout=120,
                         check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def audit(work: Path, ok_refs: set[str], failed_refs: set[str]) -> Audit:
    """The SQL cross-check of DESIGN.md §1 over the shop, the broker and the inventory."""
    result = Audit()
    rows = dict(_query(work / "shop.sqlite", "SELECT tx_id, keys FROM rocketbox_transaction "
                                              "WHERE state = 'COMMIT'"))
    orders = {ref for (ref,) in _query(work / "shop.sqlite", "SELECT ref FROM shop_order")}
    result.committed_rows = len(rows)
    records = broker_records(work / "broker")
    commits = collections.Counter(r["transaction_id"] for r in records
                                  if r["sysflag"] == "commit")
    result.broker_commits = sum(commits.values())
    for tx_id in rows:
        if commits[tx_id] == 0:
            result.divergences.append(f"lost: {tx_id} committed in the DB, not in the broker")
        elif commits[tx_id] > 1:
            result.divergences.append(f"duplicate: {tx_id} committed {commits[tx_id]} times")
    for tx_id in set(commits) - set(rows):
        result.divergences.append(f"phantom: {tx_id} committed in the broker, not in the DB")
    if orders != ok_refs:
        result.divergences.append(f"orders table: {len(orders ^ ok_refs)} order(s) differ "
                                  "from the 201 answers")
    if set(rows.values()) != ok_refs:
        result.divergences.append("status rows: keys differ from the committed orders")
    mentioned = {key for r in records for key in str(r.get("keys") or "").split()}
    for ref in sorted(failed_refs & (mentioned | orders)):
        result.divergences.append(f"rolled back order {ref} reached the broker or the DB")
    reserved = dict(_query(work / "inventory.sqlite",
                           "SELECT tx_id, order_ref FROM inventory_reservation"))
    result.consumed = len(reserved)
    if set(reserved) != set(rows):
        result.divergences.append(f"inventory: {len(set(reserved) ^ set(rows))} message(s) "
                                  "consumed that should not be, or missing")
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
    return None


def spark_audit(demo: Demo, env: dict[str, str], timeout: float) -> tuple[str, bool]:
    """Run ``spark.audit_job`` over the demo's files: ``(what it said, divergent)``."""
    work = demo.work
    part = demo.part("spark-audit", [sys.executable, "-m", "spark.audit_job", "--jdbc-url",
                                     f"jdbc:sqlite:{work / 'shop.sqlite'}", "--commitlog",
                                     str(work / "broker"), "--json", str(work / "audit.json"),
                                     "--html", str(work / "audit.html"), "--quiet"], env)
    assert part.process is not None
    try:
        code = part.process.wait(timeout)
    except subprocess.TimeoutExpired:
        part.stop()
        return f"timed out after {timeout:.0f}s (skipped)", False
    if code == 0:
        return f"clean (report: {work / 'audit.html'})", False
    if code == 1:
        return f"divergences (see {work / 'audit.json'})", True
    tail = part.log().strip().splitlines()[-1:] or ["no output"]
    return f"could not run, skipped: {tail[0][:120]}", False


# -- running it ----------------------------------------------------------------------------


@dataclass
class Demo:
    work: Path
    console: Console
    parts: list[Part] = field(default_factory=list)

    def part(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Part:
        part = Part(name, list(argv), env, self.work / "logs" / f"{name}.log")
        self.parts.append(part)
        part.start()
        return part

    def stop_all(self) -> None:
        for part in reversed(self.parts):
            part.stop()


def _env(work: Path, broker: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOP_")}
    env.update({
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
        "PYTHONUNBUFFERED": "1",
        "SHOP_DB": f"sqlite:///{work / 'shop.sqlite'}",
        "SHOP_INVENTORY_DB": f"sqlite:///{work / 'inventory.sqlite'}",
        "SHOP_CELERY_BROKER": f"sqla+sqlite:///{work / 'celery.sqlite'}",
        "SHOP_BROKER": broker,
    })
    return env


@contextlib.contextmanager
def _terminating(demo: Demo) -> Iterator[None]:
    """Stop every part on the way out, also on SIGTERM and Ctrl-C."""
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        demo.stop_all()
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def run(orders: int, work: Path, console: Console, *, timeout: float, spark: str) -> int:
    started = time.monotonic()
    if work.exists():
        shutil.rmtree(work)
    (work / "logs").mkdir(parents=True)
    demo = Demo(work, console)
    python = sys.executable
    timings: dict[str, float] = {}
    with _terminating(demo):
        console.print(f"[b]rocketbox demo[/b]: {orders} orders, everything in {work}")
        broker = demo.part("broker", [python, "-m", "broker_lite", "serve", "--data-dir",
                                      str(work / "broker"), "--port", "0", "--grpc-port", "0",
                                      "--tx-timeout", "1", "--tx-check-interval", "0.5",
                                      "--auto-create-topics"],
                           dict(os.environ, PYTHONUNBUFFERED="1"))
        native = broker.wait_for(_READY, 30).group(1)
        env = _env(work, native)
        migrated = subprocess.run([python, "-m", SHOP, "migrate"], env=env, cwd=REPO,
                                  capture_output=True, text=True, timeout=120)
        if migrated.returncode != 0:
            raise DemoError(f"migrate failed:\n{migrated.stdout}{migrated.stderr}")
        checker = demo.part("checker", [python, "-m", SHOP, "checker"], env)
        inventory = demo.part("inventory", [python, "-m", SHOP, "inventory"], env)
        relay = demo.part("relay", [python, "-m", SHOP, "relay", "--demo-crash-dir",
                                    str(work / "crashed")], env)
        web = demo.part("web", [python, "-m", SHOP, "web", "--port", "0"], env)
        checker.wait_for("checker ready", 60)
        inventory.wait_for("inventory ready", 60)
        relay.wait_for(r"ready\.", 60)
        address = web.wait_for(r"shop ready http://(\S+)", 60).group(1)
        timings["start-up"] = time.monotonic() - started
        console.print(f"broker {native}, shop http://{address}, relay, check-back responder "
                      f"and inventory consumer up ({timings['start-up']:.1f}s)")

        def supervise() -> None:
            if not relay.alive():
                relay.stop(timeout=2)  # beat's child, if it outlived the worker
                relay.start()

        plan_ = plan(orders)
        answers: collections.Counter[str] = collections.Counter()
        ok_refs: set[str] = set()
        failed_refs: set[str] = set()
        sending = time.monotonic()
        progress = Progress(TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        with progress:
            task = progress.add_task("orders", total=len(plan_))
            for order in plan_:
                status, _body = post(address, order)
                answers[str(status)] += 1
                if status == 201:
                    ok_refs.add(order.ref)
                else:
                    failed_refs.add(order.ref)
                supervise()
                progress.update(task, advance=1, description=(
                    f"orders  [green]{len(ok_refs)} committed[/green]  "
                    f"[yellow]{len(failed_refs)} rolled back[/yellow]  "
                    f"[red]{relay.starts - 1} relay kills[/red]"))
        timings["sending"] = time.monotonic() - sending
        waiting = time.monotonic()

        def consumed_all() -> bool:
            supervise()
            rows = _query(work / "inventory.sqlite",
                          "SELECT count(*) FROM inventory_reservation")
            return bool(rows[0][0] >= len(ok_refs))

        remaining = max(10.0, timeout - (time.monotonic() - started))
        poll(consumed_all, remaining, "the inventory did not consume every order in time")
        timings["relay and consume"] = time.monotonic() - waiting
        auditing = time.monotonic()
        result = audit(work, ok_refs, failed_refs)
        timings["audit"] = time.monotonic() - auditing
        spark_result = "off"
        if spark != "off":
            why_not = spark_available()
            left = timeout - (time.monotonic() - started)
            if why_not is not None:
                spark_result = f"skipped: {why_not}"
            elif left < 30:
                spark_result = "skipped: not enough time left"
            else:
                console.print("running the Spark audit (spark.audit_job, local[*]) ...")
                spark_started = time.monotonic()
                spark_result, divergent = spark_audit(demo, env, left - 5)
                timings["spark audit"] = time.monotonic() - spark_started
                if divergent:
                    result.divergences.append(f"spark audit: {spark_result}")
        checkbacks = len(set(re.findall(
            r"check-back of transaction '(\w+)' resolved it: committed", broker.log())))
    crashes = len(list((work / "crashed").glob("*"))) if (work / "crashed").exists() else 0
    timings["total"] = time.monotonic() - started
    _summary(console, orders, answers, result, crashes, checkbacks, timings)
    console.print(f"Spark audit: {spark_result}")
    for line in result.divergences[:20]:
        console.print(f"[red]divergence[/red] {line}")
    rolled_back = len(failed_refs)
    print(f"demo: committed={len(ok_refs)} rolled_back={rolled_back} "
          f"consumed={result.consumed} divergences={len(result.divergences)}", flush=True)
    return 0 if not result.divergences else 1


def _summary(console: Console, orders: int, answers: collections.Counter[str], result: Audit,
             crashes: int, checkbacks: int, timings: dict[str, float]) -> None:
    table = Table(title="rocketbox demo")
    table.add_column("what")
    table.add_column("count", justify="right")
    table.add_row("orders sent", str(orders))
    table.add_row("  201 created (committed)", str(answers["201"]))
    table.add_row("  422 unknown item (rolled back)", str(answers["422"]))
    table.add_row("  409 too many (rolled back)", str(answers["409"]))
    table.add_row("status rows (COMMIT)", str(result.committed_rows))
    table.add_row("broker commit records", str(result.broker_commits))
    table.add_row("relay killed between half and commit", str(crashes))
    table.add_row("halves committed by check-back", str(checkbacks))
    table.add_row("consumed by inventory (inbox)", str(result.consumed))
    colour = "green" if not result.divergences else "red"
    table.add_row("divergences", f"[{colour}]{len(result.divergences)}[/{colour}]")
    table.add_section()
    for name, seconds in timings.items():
        table.add_row(f"time: {name}", f"{seconds:.1f}s")
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocketbox demo", description="The end-to-end demo on embedded defaults "
        "(SQLite, broker_lite, Celery on SQLite): orders over HTTP, rollbacks, relay "
        "crashes resolved by check-back, an inbox consumer and a consistency audit.")
    parser.add_argument("--orders", type=int, default=200,
                        help="how many orders to send (default: 200)")
    parser.add_argument("--quick", action="store_true", help="30 orders (for CI)")
    parser.add_argument("--dir", type=Path, default=Path(".demo"),
                        help="working directory, wiped first (default: .demo)")
    parser.add_argument("--spark", choices=("auto", "on", "off"), default="auto",
                        help="also run the Spark audit (spark.audit_job) when pyspark and "
                             "Java are there; auto: yes, except with --quick")
    parser.add_argument("--timeout", type=float, default=170.0,
                        help="give up after this many seconds (default: 170)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    orders = 30 if args.quick else args.orders
    if orders < 1:
        parser.error("--orders must be >= 1")
    if not (REPO / "examples" / "flask_shop" / "run.py").exists():
        print("rocketbox demo: needs a source checkout (examples/flask_shop is missing)",
              file=sys.stderr)
        return 2
    console = Console()
    try:
        spark = args.spark if args.spark != "auto" else ("off" if args.quick else "on")
        return run(orders, args.dir.resolve(), console, timeout=args.timeout, spark=spark)
    except DemoError as exc:
        print(f"rocketbox demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
