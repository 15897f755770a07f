"""The demo's run: the parts it starts, the orders it sends, its summary, its command line.

The orders are :mod:`examples.demo.orders`; the targets :mod:`examples.demo.targets`
(and :mod:`examples.demo.nats_part`); the ACL's accounts :mod:`examples.demo.accounts`;
the Spark audit :mod:`examples.demo.spark_part`.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from examples.demo.accounts import demo_acl, keys_of, signed_as
from examples.demo.audit import (
    BASE_SLO,
    Outcome,
    audit,
    exported_records,
    print_spark,
    print_summary,
    query,
    spark_available,
)
from examples.demo.nats_part import EXPORT, export_records, start_nats_part
from examples.demo.orders import plan, post
from examples.demo.parts import REPO, DemoError, RelaySupervisor, poll
from examples.demo.spark_part import audit_command, spark_audit
from examples.demo.targets import (
    BROKER_FLAGS,
    TARGETS,
    broker_address,
    rabbitmq_export,
    rabbitmq_node,
)
from outbox.targets.address import redacted_address
from procgroup import Process, ProcessError

__all__ = ["DemoError", "build_parser", "main"]

SHOP = "examples.flask_shop.run"
_READY = re.compile(r"broker_lite ready native=(\S+) grpc=(\S+)")


# -- running it ----------------------------------------------------------------------------


@dataclass
class Demo:
    work: Path
    console: Console
    parts: list[Process] = field(default_factory=list)

    def part(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Process:
        part = Process(argv, log=self.work / "logs" / f"{name}.log", env=env, cwd=REPO,
                       name=name)
        self.parts.append(part)
        return part.start()

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


def run(orders: int, work: Path, console: Console, *, timeout: float, spark: str,
        spark_timeout: float = 600.0, target: str = "broker-lite", acl: bool = False) -> int:
    started = time.monotonic()
    if work.exists():
        shutil.rmtree(work)
    (work / "logs").mkdir(parents=True)
    demo = Demo(work, console)
    python = sys.executable
    timings: dict[str, float] = {}
    rabbitmq = target == "rabbitmq"
    if rabbitmq and acl:
        raise DemoError("--acl is broker_lite's (its ACL); RabbitMQ has users of its own")
    with _terminating(demo), contextlib.ExitStack() as servers:
        console.print(f"[b]rocketbox demo[/b]: {orders} orders to {target}, everything in "
                      f"{work}")
        accounts = demo_acl() if acl else None
        acl_flags: list[str] = []
        if accounts is not None:
            (work / "acl.json").write_text(json.dumps(accounts, indent=1))
            (work / "acl.json").chmod(0o600)
            acl_flags = ["--acl", str(work / "acl.json")]
        broker: Process | None = None
        if target == "nats":
            broker, address = start_nats_part(demo, work)
            env = _env(work, address)
        elif rabbitmq:
            env = _env(work, rabbitmq_node(servers))
        else:
            broker = demo.part("broker", [python, "-m", "broker_lite", "serve", "--data-dir",
                                          str(work / "broker"), "--port", "0", "--grpc-port",
                                          "0", *BROKER_FLAGS[target], *acl_flags],
                               dict(os.environ, PYTHONUNBUFFERED="1"))
            ready = broker.wait_for(_READY, 60)
            env = _env(work, broker_address(target, ready.group(1), ready.group(2),
                                             keys_of(accounts, "admin")))
        migrated = subprocess.run([python, "-m", SHOP, "migrate"], env=env, cwd=REPO,
                                  capture_output=True, text=True, timeout=120)
        if migrated.returncode != 0:
            raise DemoError(f"migrate failed:\n{migrated.stdout}{migrated.stderr}")
        checker = demo.part("checker", [python, "-m", SHOP, "checker"],
                            signed_as(env, keys_of(accounts, "checker")))
        inventory = demo.part("inventory", [python, "-m", SHOP, "inventory"],
                              signed_as(env, keys_of(accounts, "inventory"),
                                        prefix="SHOP_INVENTORY_"))
        # no relay kills on RabbitMQ: a kill between the confirm and the mark sends the row
        # again, a second message the audits count (tests/targets/rabbitmq kills it there)
        crash = [] if rabbitmq else ["--demo-crash-dir", str(work / "crashed")]
        relay = demo.part("relay", [python, "-m", SHOP, "relay", *crash],
                          signed_as(env, keys_of(accounts, "relay")))
        web = demo.part("web", [python, "-m", SHOP, "web", "--port", "0"], env)
        checker.wait_for("checker ready", 90)
        inventory.wait_for("inventory ready", 90)
        relay.wait_for(r"ready\.", 90)
        address = web.wait_for(r"shop ready http://(\S+)", 90).group(1)
        timings["start-up"] = time.monotonic() - started
        shown = redacted_address(env['SHOP_BROKER'])
        console.print(f"broker {shown}, shop http://{address}, relay, "
                      f"check-back responder "
                      f"and inventory consumer up ({timings['start-up']:.1f}s)")
        supervisor = RelaySupervisor(relay)
        plan_ = plan(orders)
        answers: collections.Counter[str] = collections.Counter()
        ok_refs: set[str] = set()
        failed_refs: set[str] = set()
        sending = time.monotonic()
        progress = Progress(TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)

        def kills() -> str:
            return f"[red]{supervisor.kills} relay kills[/red]"

        def sent() -> str:  # kills go on after the last order: both lines keep counting
            return (f"orders    [green]{len(ok_refs)} committed[/green]  "
                    f"[yellow]{len(failed_refs)} rolled back[/yellow]  {kills()}")

        with progress:
            task = progress.add_task("orders", total=len(plan_))
            for order in plan_:
                status, _body = post(address, order)
                answers[str(status)] += 1
                if status == 201:
                    ok_refs.add(order.ref)
                else:
                    failed_refs.add(order.ref)
                supervisor.check()
                progress.update(task, advance=1, description=sent())
            timings["sending"] = time.monotonic() - sending
            waiting = time.monotonic()
            consuming = progress.add_task("consumed", total=len(ok_refs))

            def consumed_all() -> bool:
                supervisor.check()
                rows = query(work / "inventory.sqlite",
                              "SELECT count(*) FROM inventory_reservation")
                progress.update(consuming, completed=rows[0][0],
                                description=f"consumed  {kills()}")
                progress.update(task, description=sent())
                return bool(rows[0][0] >= len(ok_refs))

            remaining = max(10.0, timeout - (time.monotonic() - started))
            poll(consumed_all, remaining, "the inventory did not consume every order in time")
        timings["relay and consume"] = time.monotonic() - waiting
        downtime, kill_period = supervisor.downtime(), supervisor.kill_period()
        auditing = time.monotonic()
        export: Path | None = None
        records: list[dict[str, Any]] | None = None
        if target == "nats":
            records, export = export_records(env["SHOP_BROKER"], work), work / EXPORT
        elif rabbitmq:
            export = rabbitmq_export(work, env["SHOP_BROKER"])
            records = exported_records(export)
        result = audit(work, ok_refs, failed_refs, records=records)
        timings["audit"] = time.monotonic() - auditing
        slo = BASE_SLO + kill_period
        spark_result = "off"
        spark_again = ""
        if spark != "off":
            why_not = spark_available()
            if why_not is not None:
                spark_result = f"skipped: {why_not}"
            else:
                as_of = datetime.now(UTC).isoformat(timespec="seconds")
                audit_args = audit_command(work, slo, as_of, export=export)
                spark_again = shlex.join(["rocketbox", "audit", *audit_args])
                console.print(f"running the Spark audit (spark.audit_job, local[*], "
                              f"SLO {slo:.1f}s, grace 0, as of {as_of}) ...")
                spark_started = time.monotonic()
                spark_result, counts = spark_audit(demo, env, spark_timeout, audit_args)
                timings["spark audit"] = time.monotonic() - spark_started
                for category, count in counts.items():
                    result.diverged(f"spark: {category}", f"spark audit: {count} {category} "
                                    f"({spark_result})", count)
        checkbacks = 0 if broker is None else len(set(re.findall(
            r"check-back of transaction '(\w+)' resolved it: committed", broker.output())))
    crashed = len(list((work / "crashed").glob("*"))) if (work / "crashed").exists() else 0
    timings["total"] = time.monotonic() - started
    print_summary(console, orders, answers, result, Outcome(
        kills=supervisor.kills, crash_orders=crashed, checkbacks=checkbacks,
        downtime=downtime, longest=max(supervisor.outages, default=downtime),
        kill_period=kill_period, slo=slo),
        timings)
    print_spark(console, spark_result, spark_again)
    for line in result.lines[:20]:
        console.print(f"[red]divergence[/red] {line}")
    rolled_back = len(failed_refs)
    print(f"demo: committed={len(ok_refs)} rolled_back={rolled_back} "
          f"consumed={result.consumed} divergences={result.divergences}", flush=True)
    return 0 if not result.divergences else 1


def build_parser() -> argparse.ArgumentParser:
    """``rocketbox demo``'s command line."""
    parser = argparse.ArgumentParser(
        prog="rocketbox demo", description="The end-to-end demo on embedded defaults "
        "(SQLite, broker_lite, Celery on SQLite): orders over HTTP, rollbacks, relay "
        "crashes resolved by check-back, an inbox consumer and a consistency audit.")
    parser.add_argument("--orders", type=int, default=200,
                        help="how many orders to send (default: 200)")
    parser.add_argument("--quick", action="store_true", help="30 orders (for CI)")
    parser.add_argument("--target", choices=TARGETS, default="broker-lite",
                        help="where the relay sends: broker_lite's native door (default), or "
                             "rocketmq-proxy: broker_lite's gRPC door behaving as Apache "
                             "RocketMQ 5's proxy (--grpc-proxy-semantics), reached through "
                             "the official RocketMQ client, as a RocketMQ cluster would be; "
                             "or nats: a private nats-server with JetStream (docs/nats.md); "
                             "or rabbitmq: a RabbitMQ node (rabbitmq-server, started as the "
                             "tests start it; Orders is a stream; no relay kills)")
    parser.add_argument("--acl", action="store_true",
                        help="run the broker with an ACL: the relay, the check-back responder "
                             "and the inventory consumer each sign as an account of their own, "
                             "with only what it needs (written to DIR/acl.json; docs/acl.md)")
    parser.add_argument("--dir", type=Path, default=Path(".demo"),
                        help="working directory, wiped first (default: .demo)")
    parser.add_argument("--spark", choices=("auto", "on", "off"), default="auto",
                        help="also run the Spark audit (spark.audit_job) when pyspark and "
                             "Java are there; auto: yes, except with --quick")
    parser.add_argument("--timeout", type=float, default=420.0,
                        help="give up when the orders are not all consumed this many seconds "
                             "after the start (default: %(default)s)")
    parser.add_argument("--spark-timeout", type=float, default=600.0,
                        help="seconds the Spark audit may take before it is skipped "
                             "(default: %(default)s; a busy machine needs minutes)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    orders = 30 if args.quick else args.orders
    if orders < 1:
        parser.error("--orders must be >= 1")
    console = Console()
    if args.acl and args.target == "nats":
        parser.error("--acl: the demo's ACL is broker_lite's; not with --target nats")
    try:
        spark = args.spark if args.spark != "auto" else ("off" if args.quick else "on")
        return run(orders, args.dir.resolve(), console, timeout=args.timeout, spark=spark,
                   spark_timeout=args.spark_timeout, target=args.target, acl=args.acl)
    except (DemoError, ProcessError) as exc:
        print(f"rocketbox demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
