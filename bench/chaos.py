"""Chaos suite: break the servers under a running outbox, then check nothing was lost.

Usage::

    .venv/bin/python bench/chaos.py --quick --seed 1            # ~1 min, what CI runs
    .venv/bin/python bench/chaos.py --single broker_kill         # one fault at 500 tx/s
    .venv/bin/python bench/chaos.py --schedules 20 --seed 100    # 20 combined schedules
    .venv/bin/python bench/chaos.py --vacuum --hold 300          # the blocked-vacuum run

Each run starts PostgreSQL, Redis, broker_lite, ``rocketbox relay`` and
``rocketbox checker`` on loopback (``_chaos_cluster``), a producer writing
units of work through ``publish()`` at ``--rate`` transactions per second,
some rolled back, and a consumer group (``_chaos_load``); it applies a seeded
schedule of faults (``_chaos_faults``: ``--list-faults``), waits for the
backlog to drain, stops the relay and the broker, then checks the invariant
from the database, the broker's commit log and the consumer, runs
``rocketbox audit`` (``--no-audit`` skips it), and prints one summary line.

Results go to ``bench/results/chaos-<label>.json`` (``--label``; ``--quick``
and ``--no-save`` only print) and, with ``--readme``, the table between the
``chaos`` markers of ``bench/README.md`` is rebuilt from every result file.
Exit status: 0 when every run kept the invariant (and its audit was clean),
1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    RESULTS_DIR,
    TMP_DIR,
    add_repository_paths,
    describe_machine,
    git_state,
    load_average,
    machine_summary,
    utc_now,
    write_json,
)

add_repository_paths()

from _chaos_check import audit, database_truth, invariant, timings, unrelayed  # noqa: E402
from _chaos_cluster import Cluster, cluster  # noqa: E402
from _chaos_faults import KINDS, Fault, apply, clear, combined_schedule, single  # noqa: E402
from _chaos_load import (  # noqa: E402
    Consumer,
    producer_main,
    read_failures,
    read_units,
    start_producer,
    wait_relaying,
)
from _chaos_report import readme_table  # noqa: E402
from _chaos_vacuum import run_vacuum  # noqa: E402

#: the relay's sweep interval (``CelerySettings.sweep_interval``): the bound after a fault
#: is sweep_interval + 5 s
SWEEP_INTERVAL = 5.0
BAD_KEYS = ("lost", "duplicate", "phantom", "consumer_lost", "consumer_phantom",
            "acknowledged_not_in_db", "rolled_back_in_db")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Faults: " + "; ".join(f"{k}: {v}"
                                                              for k, v in KINDS.items()))
    p.add_argument("--role", choices=("driver", "producer"), default="driver",
                   help=argparse.SUPPRESS)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--quick", action="store_true",
                      help="a short schedule (~1 min): relay, broker and checker killed, Redis "
                           "restarted, 100 tx/s for 30 s, no audit unless --audit")
    what.add_argument("--single", metavar="FAULT", choices=sorted(KINDS),
                      help="one fault of this kind, alone")
    what.add_argument("--schedules", type=int, metavar="N",
                      help="N combined schedules (every fault once, seeded), seeds SEED..")
    what.add_argument("--vacuum", action="store_true",
                      help="the blocked-vacuum run: a snapshot held --hold seconds under load")
    what.add_argument("--list-faults", action="store_true", help="list the fault kinds")
    p.add_argument("--seed", type=int, default=1, help="schedule seed (default 1)")
    p.add_argument("--rate", type=float, default=500.0, help="offered tx/s (default 500)")
    p.add_argument("--seconds", type=float, default=None,
                   help="seconds of load (default: 60 single, 120 combined, 30 quick)")
    p.add_argument("--outage", type=float, default=10.0,
                   help="length of a --single fault, seconds (default 10)")
    p.add_argument("--threads", type=int, default=6, help="producer threads (default 6)")
    p.add_argument("--rollback", type=float, default=0.1,
                   help="share of units rolled back (default 0.1)")
    p.add_argument("--hold", type=float, default=300.0,
                   help="--vacuum: seconds the snapshot is held (default 300)")
    p.add_argument("--drain-timeout", type=float, default=120.0,
                   help="seconds to wait for the backlog after the load (default 120)")
    p.add_argument("--no-audit", dest="audit", action="store_false",
                   help="skip rocketbox audit (Spark: minutes a run, far more on a busy machine)")
    p.add_argument("--audit", dest="audit", action="store_true",
                   help="run the audit after --quick too")
    p.add_argument("--audit-every", type=int, default=1, metavar="N",
                   help="with --schedules: audit the first schedule and every Nth after it "
                        "(default 1: all)")
    p.add_argument("--audit-timeout", type=float, default=1800.0, metavar="S",
                   help="give up on the audit after S seconds (recorded; default 1800)")
    p.add_argument("--keep", action="store_true",
                   help="keep the run's directory (server logs) under bench/results/tmp")
    p.set_defaults(audit=None)
    p.add_argument("--label", default=None, help="results file bench/results/chaos-LABEL.json")
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument("--readme", action="store_true",
                   help="rebuild the chaos table of bench/README.md from the result files")
    # producer role
    for name in ("--db", "--redis", "--broker", "--out"):
        p.add_argument(name, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.audit is None:
        args.audit = not args.quick
    if args.seconds is None:
        args.seconds = 30.0 if args.quick else 60.0 if args.single else 120.0
    if args.quick:
        args.rate = min(args.rate, 100.0)
    return args


# -- one run ------------------------------------------------------------------------------


def _run_schedule(c: Cluster, faults: list[Fault], t0: float) -> None:
    events = sorted([(f.start, 0, f) for f in faults] + [(f.end, 1, f) for f in faults],
                    key=lambda e: (e[0], e[1]))
    for at, kind, fault in events:
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        action = clear if kind else apply
        try:
            action(c, fault)
        except Exception as exc:  # recorded: a server that would not come back is a finding
            fault.notes.append(f"{action.__name__} failed: {type(exc).__name__}: "
                               f"{str(exc)[:300]}")
        if kind:
            fault.cleared_at = time.monotonic()
        else:
            fault.applied_at = time.monotonic()


def _drain(c: Cluster, consumer: Consumer, timeout: float) -> float | None:
    """Seconds until the consumer saw every committed unit; None at the timeout."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        truth = database_truth(c)
        if truth.keys() <= consumer.seen().keys():
            return round(time.monotonic() - start, 1)
        time.sleep(1.0)
    return None


def _relay_health(c: Cluster) -> dict[str, Any]:
    text = c.relay.output()
    return {"relay_exit": c.relay.exited(), "relay_starts": c.relay.starts,
            "relay_unrecoverable": text.count("Unrecoverable error"),
            "checker_exit": c.checker.exited()}


def _relative(f: Fault, t0: float) -> dict[str, Any]:
    """The fault with its applied/cleared times in seconds from the start of the load."""
    out = f.as_dict()
    for key in ("applied_at", "cleared_at"):
        out[key] = round(out[key] - t0, 2) if out[key] is not None else None
    return out


def run_one(args: argparse.Namespace, seed: int, faults: list[Fault], name: str, *,
            audit_it: bool) -> dict[str, Any]:
    TMP_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-", dir=TMP_DIR))
    started = utc_now()
    load = load_average()
    try:
        with cluster(work) as c, Consumer(c.broker_native) as consumer:
            ready_s = wait_relaying(c, consumer)
            out = work / "units.jsonl"
            producer = start_producer(c, args, seed, out)
            t0 = time.monotonic()
            _run_schedule(c, faults, t0)
            if producer.wait(args.seconds + 300) != 0:
                raise RuntimeError(f"producer failed; see {work / 'producer.log'}")
            produced = read_units(out)
            drain = _drain(c, consumer, args.drain_timeout)
            health = _relay_health(c)
            backlog = unrelayed(c)
            c.relay.stop()
            c.checker.stop()
            c.broker.stop()
            truth = database_truth(c)
            seen = consumer.seen()
            result: dict[str, Any] = {
                "name": name, "seed": seed, "started": started, "load_average": load,
                "relay_ready_s": ready_s,
                "rate": args.rate, "seconds": args.seconds,
                "faults": [_relative(f, t0) for f in faults],
                "drain_after_load_s": drain, "backlog_left": backlog, **health,
                "invariant": invariant(c, truth, seen, consumer.redeliveries, produced),
                "timings": timings(faults, produced, truth, seen),
                "consumer_errors": consumer.errors,
                # why units failed, by kind (relative seconds), so a thin run says why
                "producer_failures": {k: {**v, "first_at": round(v["first_at"] - t0, 1),
                                          "examples": [{**e, "at": round(e["at"] - t0, 1)}
                                                       for e in v["examples"]]}
                                      for k, v in read_failures(out).items()},
            }
            if audit_it:
                # the audit takes minutes (far more on a busy machine): show the invariant first
                print("before the audit: " + summary_line(result).replace(" audit=skipped", ""),
                      flush=True)
                result["audit"] = audit(c, work / "audit.json", args.audit_timeout)
            result["load_average_end"] = load_average()
            return result
    finally:
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def ok(result: dict[str, Any]) -> bool:
    if "error" in result:
        return False
    inv = result["invariant"]
    audit_clean = result.get("audit", {}).get("clean", True)
    return all(inv[k] == 0 for k in BAD_KEYS) and audit_clean is not False


def summary_line(r: dict[str, Any]) -> str:
    inv, t = r["invariant"], r["timings"]
    lat = t["visible_ms_outside_faults"]
    kinds = ",".join(f["kind"] for f in r["faults"]) or "none"
    audit = r.get("audit")
    audit_text = ("skipped" if audit is None else "timed out" if audit.get("timed_out")
                  else "killed" if audit.get("killed")
                  else "clean" if audit["clean"] else f"exit {audit['exit']}")
    worst = max((f["visible_after_clear_s"] for f in t["faults"]), default=0.0)
    return (f"chaos {'OK' if ok(r) else 'FAIL'} seed={r['seed']} faults={kinds} "
            f"committed={inv['units_committed']} rolled_back={inv['units_rolled_back']} "
            f"failed={inv['units_failed']} lost={inv['lost']} phantom={inv['phantom']} "
            f"duplicate={inv['duplicate']} pending={inv.get('pending', 0)} "
            f"consumer_lost={inv['consumer_lost']} "
            f"redelivered={inv['consumer_redeliveries']} "
            f"worst_visible_after_clear={worst}s drain={t['drain_after_last_fault_s']}s "
            f"p50={lat['p50']}ms p99={lat['p99']}ms relay_exit={r['relay_exit']} "
            f"audit={audit_text}"
            + "".join(f"\n  failed {v['count']}x from {v['first_at']}s: {k}"
                      for k, v in list(r.get("producer_failures", {}).items())[:3]))


def plan(args: argparse.Namespace) -> list[tuple[int, list[Fault], str]]:
    warmup = 10.0
    if args.quick:
        kinds = ["relay_kill", "broker_kill", "checker_kill", "redis_restart_lost"]
        return [(args.seed, combined_schedule(args.seed, args.seconds, 5.0, kinds=kinds,
                                              tail=3.0), "quick")]
    if args.single:
        return [(args.seed, single(args.single, warmup + 10.0, args.outage),
                 f"single {args.single}")]
    count = args.schedules or 1
    return [(seed, combined_schedule(seed, args.seconds, warmup, kinds=list(KINDS), tail=10.0),
             "combined") for seed in range(args.seed, args.seed + count)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role == "producer":
        return producer_main(args)
    if args.list_faults:
        for kind, what in KINDS.items():
            print(f"{kind:22} {what}")
        return 0
    if args.readme:
        readme_table(RESULTS_DIR, BENCH_DIR / "README.md")
        return 0
    document: dict[str, Any] = {"benchmark": "chaos", "started": utc_now(),
                                "argv": sys.argv[1:], "git": git_state(),
                                "machine": describe_machine(TMP_DIR),
                                "sweep_interval_s": SWEEP_INTERVAL, "runs": []}
    print(machine_summary(document["machine"]), flush=True)
    label = args.label or ("quick" if args.quick else args.single or
                           ("vacuum" if args.vacuum else f"combined-{args.seed}"))
    path = RESULTS_DIR / f"chaos-{label}.json"
    save = not args.no_save and (not args.quick or args.label is not None)
    if args.vacuum:
        document["vacuum"] = run_vacuum(args)
        print(json.dumps(document["vacuum"]["summary"]), flush=True)
        good = True
    else:
        good = True
        for i, (seed, faults, name) in enumerate(plan(args)):
            audit_it = args.audit and i % max(1, args.audit_every) == 0
            try:
                result = run_one(args, seed, faults, name, audit_it=audit_it)
            except Exception as exc:  # recorded; the next schedule still runs
                document.setdefault("errors", []).append(
                    {"seed": seed, "name": name, "error": f"{type(exc).__name__}: {exc}"[:2000]})
                print(f"chaos ERROR seed={seed} {type(exc).__name__}: {str(exc)[:500]}",
                      flush=True)
                good = False
                continue
            document["runs"].append(result)
            good = good and ok(result)
            print(summary_line(result), flush=True)
            if save:
                write_json(path, document)
    if save:
        write_json(path, document)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
