"""Relay benchmark: committed outbox rows to consumer-visible messages, ours and a peer's.

Usage::

    .venv/bin/python bench/relay.py [--rows N] [--repeat K] [--rate R] [--seconds S]
                                    [--peer-configs W/B/F,...] [--quick]

Both sides relay rows of a PostgreSQL outbox table to a broker a consumer
reads, on one private PostgreSQL cluster (separate tables), with the same
bodies (JSON of 256 bytes carrying a sequence number ``i``):

* **ours**: the application writes rows with ``outbox.publish.publish`` in a
  SQLAlchemy session (psycopg); a Celery worker (``outbox.celery.run_worker``,
  threads pool, Redis as Celery's broker, one process) relays them to
  broker_lite with ``BrokerLitePublisher`` (halves, then end-transaction). The
  consumer long-polls the topic's queues with ``AsyncPullConsumer``.
* **peer**: faststream-outbox 0.19.0. The application writes rows with
  ``OutboxBroker.publish(..., session=session)`` in an async SQLAlchemy session
  (asyncpg, so ``pg_notify`` wakes the relay); the relay is a FastStream
  subscriber on its outbox table, stacked under a ``RedisBroker`` stream
  publisher, in one process. The consumer reads the stream with ``XREAD BLOCK``.

Two measurements, each repeated, ours and the peer back to back, the order
flipping every repetition:

* **throughput**: N rows are committed while the relay is idle (ours: no
  ``on_commit`` hook, as if Celery's broker had been down; peer: the relay
  process is started but its broker is not). The clock starts when the relay
  is told to go (ours: one ``rocketbox.sweep`` task is enqueued, which is what
  beat does every few seconds; peer: ``OutboxBroker.start()``) and stops when
  the consumer has seen the last of the N messages. Rate = N / that time.
  Duplicates and missing messages are counted (missing must be 0).
* **latency**: a producer process commits ``--rate`` transactions per second
  (one message each, paced on a schedule) for ``--seconds`` while the relay
  runs. Commit-to-visible = when the consumer (this process) received the
  message minus when the producer's DB commit returned, both
  ``time.monotonic()`` (one clock for all processes on Linux). Ours takes the
  commit time in an ``after_commit`` listener that runs before the outbox's
  own hook. By default (``CelerySettings.listen`` on PostgreSQL) the commit
  itself wakes the worker's listener (``pg_notify`` in the row's INSERT);
  with ``--no-listen`` the hook coalesces commits into ``rocketbox.relay``
  tasks, one per ``enqueue_window`` at most, and the enqueue counts as
  latency. The first
  second of the stream is a warm-up and is not counted. Every process calls
  ``gc.freeze()`` once set up (ours in the product, the harness for the rest).

Full runs write ``bench/results/relay.json`` and the section of
``bench/README.md`` between the ``relay`` markers; ``--quick`` only prints.
The peer needs the ``bench`` extra (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata as importlib_metadata
from typing import Any

from _common import (
    RESULTS_DIR,
    exit_on_sigterm,
    git_state,
    load_average,
    median,
    render_saved,
    save_result,
    scratch_dir,
    write_json,
)
from _relay_args import parse_args
from _relay_common import ENQUEUE_WINDOW_ENV, LISTEN_ENV, LISTEN_LANES_ENV, SIDES, Env
from _relay_floors import machine_ceiling
from _relay_legs import LEGS, LEGS_ENV
from _relay_nats import (
    NATS_REDIS_DB,
    ceiling,
    ceiling_line,
    floor_line,
    nats_summary,
    raw_rate,
    sql_bound_cpu,
)
from _relay_ours import (
    WORKER_SIDES,
    ours_celery_app,
    ours_listen,
    ours_relay_main,
    stop_ours_worker,
    use_ours_worker,
)
from _relay_peer import PEER_PACKAGES, PeerConfig, peer_relay_main, require_peer
from _relay_raw import raw_best
from _relay_report import (
    BAR_BOUND,
    UNQUEUED,
    markdown_section,
    report,
    rocketmq_section,
    run_header,
    summarise,
)
from _relay_rocketmq import PROXY_FLAGS, other_redis_db
from _relay_runs import (
    bound_once,
    floors_once,
    harness,
    latency_once,
    order_for,
    producer_main,
    throughput_once,
    tune_peer,
)
from _report import announce, busy_warning, result_head

log = logging.getLogger("bench.relay")


def versions() -> dict[str, str]:
    out = {}
    for name in (*PEER_PACKAGES, "celery", "sqlalchemy", "psycopg", "redis"):
        with contextlib.suppress(importlib_metadata.PackageNotFoundError):
            out[name] = importlib_metadata.version(name)
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.broker_server import start_broker_lite

    say = print
    load_before = load_average()
    warning = busy_warning(load_before)
    if warning:
        say(f"warning: {warning}")
    with scratch_dir("relay", keep=args.keep_logs) as work:
        machine = announce("relay", work)
        os.environ[LEGS_ENV] = str(work / "legs.jsonl")  # our children record their legs
        git = git_state()
        with harness(work, "relaybench") as env, contextlib.ExitStack() as stack:
            if "rocketmq" in args.sides:
                proxy = stack.enter_context(start_broker_lite(work / "proxy", PROXY_FLAGS))
                env.proxy_native, env.proxy_grpc = proxy.native, proxy.grpc
                env.rocketmq_redis = other_redis_db(env.redis)
                env.rocketmq_app = ours_celery_app(env, "rocketmq")
            if "nats" in args.sides:
                from tests.support.nats_server import start_nats

                nats_server = stack.enter_context(start_nats())
                env.nats_url = nats_server.url
                if nats_server.process is not None:  # its CPU goes into the ceiling
                    from _relay_floors import SERVER_PIDS

                    SERVER_PIDS["nats"] = nats_server.process.pid
                env.nats_redis = other_redis_db(env.redis, NATS_REDIS_DB)
                env.nats_app = ours_celery_app(env, "nats")
            configs = [PeerConfig.parse(c) for c in args.peer_configs.split(",")]
            if len(configs) > 1 and "peer" in args.sides:
                say(f"tuning the peer on {args.tune_rows:,} rows, one run per setting:")
                best, trials = tune_peer(env, configs, args.tune_rows, args.timeout, say)
            else:
                best, trials = configs[0], []
            say(f"peer setting used: {best.label} (max_workers/fetch_batch_size/"
                f"terminal_flush_batch_size)")
            try:
                if args.sweep or args.nats_sweep:  # one side's settings in alternation
                    lane_sweep(args, env, best, say)
                    return {}
                tp, lat, raw, bound = run_sides(args, env, best, say)
            finally:
                stop_ours_worker(env)
            bl_version = "broker_lite (this repository)"
            nats_runs = list(env.nats_raw)
    if nats_runs and not args.quick:  # the nats side's floors and ceiling, saved on their own
        head = result_head("relay-nats", {"source": "working tree", **git}, machine,
                           load_before)
        path = RESULTS_DIR / "relay-nats.json"
        write_json(path, {**head, "nats": nats_summary(nats_runs)})
        say(f"wrote {path} (the nats side's floors and ceiling)")
    if args.restricted:
        return {}
    result = summarise(args, tp, lat, best, trials)
    result["listen"] = ours_listen()
    result["legs"] = legs_result(lat["ours"])
    if bound:
        result["sql_bound"] = bound_summary(tp["ours"], bound)
        measured = result["sql_bound"]["ratio_median"]
        result["targets"].append({"description": "throughput: ours / SQL-only bound (issue 31)",
                                  "target": BAR_BOUND, "measured": measured, "unit": "x",
                                  "met": measured >= BAR_BOUND})
    if raw:
        result["rocketmq_client"] = client_summary(tp["rocketmq"], raw, args.raw_rows)
    if nats_runs:
        result["nats"] = nats_summary(nats_runs)
    result.update({
        **result_head("relay", {"source": "working tree", **git}, machine, load_before),
        "versions": versions(), "broker": bl_version,
    })
    return result


def legs_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over the latency runs of each leg's p50 (ms), and the samples behind it."""
    out: dict[str, Any] = {"meaning": "p50 per leg of commit-to-visible (ms), median over "
                                      "the latency runs; a row relayed by the wake-up "
                                      "listener has no task legs (bench/_relay_legs.py)",
                           "p50_ms": {}, "runs": [r.get("legs") for r in runs]}
    for name in LEGS:
        values = [r["legs"]["p50_ms"][name] for r in runs
                  if r.get("legs") and r["legs"]["p50_ms"][name] is not None]
        out["p50_ms"][name] = median(values) if values else None
    return out


def bound_summary(ours: list[dict[str, Any]], bound: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [o["per_s"] / b["per_s"] if b["per_s"] else float("nan")
              for o, b in zip(ours, bound, strict=True)]
    out: dict[str, Any] = {
        "meaning": "our relay's rows/s / the SQL-only bound's (claim with SKIP LOCKED + mark "
                   "relayed per batch, one psycopg connection, no broker), measured right "
                   "after each of our throughput runs",
        "runs": bound, "per_s_median": median([b["per_s"] for b in bound]),
        "ratios": ratios, "ratio_median": median(ratios)}
    floors = [b["floors"] for b in bound if "floors" in b]
    if floors:
        out["floors"] = {
            "meaning": "measured right after each bound (bench/_relay_floors.py): relay_sql = "
                       "Relay.drain with the broker answered in-process (rows/s); broker = "
                       "broker_lite alone, bench/broker.py's tx-batch-async and the relay's "
                       "batch shape (tx/s)",
            "relay_sql_per_s_median": median([f["relay_sql"]["per_s"] for f in floors]),
            "broker_tx_batch_async_per_s_median":
                median([f["broker_tx_batch_async"]["per_s"] for f in floors]),
            "broker_relay_shape_per_s_median":
                median([f["broker_relay_shape"]["per_s"] for f in floors])}
        ceilings = [f["ceiling"]["per_s"] for f in floors if f.get("ceiling")]
        if ceilings:
            out["floors"]["ceiling_meaning"] = (
                "the most rows/s the machine's cores allow our relay: the floors' CPU per "
                "row (relay and PostgreSQL, broker_lite in the relay's shape, the consumer "
                "in our run) added up, every core busy (bench/_relay_floors.py)")
            out["floors"]["ceiling_per_s_median"] = median(ceilings)
            out["floors"]["ours_over_ceiling"] = [
                o["per_s"] / f["ceiling"]["per_s"]
                for o, f in zip(ours, floors, strict=False) if f.get("ceiling")]
    return out


def client_summary(target: list[dict[str, Any]], raw: list[dict[str, Any]],
                   raw_rows: int) -> dict[str, Any]:
    """The RocketMQ target's rows/s over the official client's own best, per paired rep."""
    ratios = [t["per_s"] / r["per_s"] if r["per_s"] else float("nan")
              for t, r in zip(target, raw, strict=True)]
    return {"meaning": "rocketmq target rows/s / the official client's best half+commit "
                       "transactions/s against the same door, measured right after it in "
                       "the same run; both timed until the same consumer saw the last",
            "raw_rows": raw_rows, "raw": raw,
            "raw_per_s_median": median([r["per_s"] for r in raw]),
            "target_per_s_median": median([t["per_s"] for t in target]),
            "ratios": ratios, "ratio_median": median(ratios)}


def client_section(result: dict[str, Any]) -> str:
    """bench/README.md's ``relay-rocketmq-client`` section: the target against the client."""
    p, c = result["parameters"]["ours"], result["rocketmq_client"]
    lines = [*run_header(result),
             f"RocketMQ target: one Celery worker, threads pool, concurrency "
             f"{p['concurrency']}, relay batch_size {p['relay_batch_size']}, "
             f"{result['parameters']['rows']:,} rows a "
             f"run; the official client: {c['raw_rows']:,} transactions per thread count, "
             "right after each of the target's runs.", "",
             "| rep | RocketMQ target rows/s | client tx/s (best) | client threads | "
             "target / client |", "|---:|---:|---:|---:|---:|"]
    for n, (t, r, x) in enumerate(zip(result["rocketmq"]["throughput"]["runs"], c["raw"],
                                      c["ratios"], strict=True), start=1):
        lines.append(f"| {n} | {t['per_s']:,.0f} | {r['per_s']:,.0f} | {r['threads']} | "
                     f"{x:.2f}x |")
    lines.append(f"| **median** | **{c['target_per_s_median']:,.0f}** | "
                 f"**{c['raw_per_s_median']:,.0f}** | | **{c['ratio_median']:.2f}x** |")
    return "\n".join(lines)


def run_sides(args: argparse.Namespace, env: Env, best: PeerConfig, say: Any
              ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]],
                         list[dict[str, Any]], list[dict[str, Any]]]:
    """The throughput, then the latency repetitions of every side asked for: their runs,
    the official client's baseline measured after each rocketmq throughput run, and the
    SQL-only bound measured after each of ours."""
    tp: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    lat: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    raw: list[dict[str, Any]] = []
    bound: list[dict[str, Any]] = []
    profiler = None
    if args.profile and "ours" in args.sides:
        from _relay_floors import SERVER_PIDS
        from _relay_profile import Profiler

        def pids() -> dict[str, int]:
            assert env.ours_worker is not None
            return {"worker": env.ours_worker.pid, "broker": SERVER_PIDS["broker"]}

        profiler = Profiler(env.work / "profiles", pids)
    for rep in range(args.repeat if "throughput" in args.cases else 0):
        for side in order_for(rep, args.sides):
            use_ours_worker(env, side, args.concurrency, args.batch_given, args.lanes_given)
            around = profiler.around if profiler is not None and side == "ours" else \
                contextlib.nullcontext
            r = asyncio.run(throughput_once(env, side, args.rows, best, args.timeout,
                                            around=around))
            tp[side].append(r)
            say(f"  throughput rep {rep + 1} {side:8}: {r['per_s']:8,.0f} rows/s "
                f"({r['seconds']:.2f} s, missing {r['missing']}, "
                f"duplicates {r['duplicates']})")
            if side == "ours":
                if r.get("cpu_s"):
                    say("    " + cpu_line(r["cpu_s"], r["seconds"], args.rows))
                b = asyncio.run(bound_once(env, args.rows, args.batch_size))
                say(f"  throughput rep {rep + 1} bound   : {b['per_s']:8,.0f} rows/s (SQL "
                    f"only: claim SKIP LOCKED + mark relayed, {b['batches']} batches); "
                    f"ours/bound {r['per_s'] / b['per_s']:.2f}x")
                if b.get("cpu_s"):
                    say("    " + cpu_line(b["cpu_s"], b["seconds"], b["rows"]))
                if args.floors:
                    b["floors"] = asyncio.run(floors_once(env, args.rows, args.batch_size,
                                                          args.drain_lanes))
                    b["floors"]["ceiling"] = machine_ceiling(
                        b["floors"], r.get("cpu_s") or {}, args.rows,
                        len(os.sched_getaffinity(0)))
                    say(f"  throughput rep {rep + 1} floors  : "
                        + floors_text(b["floors"], r["per_s"]))
                bound.append(b)
            if side == "nats":
                batch, lanes = nats_numbers(args)  # what its relay ran with
                base = raw_rate(env.nats_url, args.raw_rows, batch, lanes)
                base["sql_bound"] = asyncio.run(sql_bound_cpu(env, args.rows, batch))
                base["ceiling"] = ceiling(base, base["sql_bound"], len(os.sched_getaffinity(0)))
                base["relay_per_s"] = r["per_s"]
                worker_cpu = (r.get("cpu_s") or {}).get("worker")
                if worker_cpu is not None:  # the relay worker's own Python, per row
                    base["ceiling"]["relay_worker_cpu_us_per_row"] = \
                        worker_cpu / args.rows * 1e6
                env.nats_raw.append(base)
                say(f"  throughput rep {rep + 1} client  : {base['per_s']:8,.0f} msg/s "
                    "(nats-py alone, confirmed publishes, best of windows "
                    + ", ".join(f"{t['window']}: {t['per_s']:,.0f}" for t in base["trials"])
                    + f"); nats/client {r['per_s'] / base['per_s']:.2f}x")
                say(floor_line(rep + 1, r["per_s"], base, base["sql_bound"]))
                say(ceiling_line(rep + 1, base["ceiling"]))
            if side == "rocketmq":
                base = raw_best(env, args.raw_rows, args.timeout)
                raw.append(base)
                say(f"  throughput rep {rep + 1} client  : {base['per_s']:8,.0f} tx/s (the "
                    f"official client alone, best of "
                    + ", ".join(f"{t['threads']} threads {t['per_s']:,.0f}"
                                for t in base["trials"])
                    + f"); rocketmq/client {r['per_s'] / base['per_s']:.2f}x")
    if profiler is not None and profiler.runs:
        from _relay_profile import print_profile

        print_profile(profiler.summary(), profiler.runs, say)
    if raw:
        summary = client_summary(tp["rocketmq"], raw, args.raw_rows)
        say("  throughput rocketmq/client per rep: "
            + ", ".join(f"{x:.2f}x" for x in summary["ratios"])
            + f" (median {summary['ratio_median']:.2f}x: the RocketMQ target's "
              f"{summary['target_per_s_median']:,.0f} rows/s over the official client's "
              f"{summary['raw_per_s_median']:,.0f} tx/s)")
    if tp["ours"] and tp["peer"]:
        ratios = [o["per_s"] / p["per_s"] if p["per_s"] else float("inf")
                  for o, p in zip(tp["ours"], tp["peer"], strict=True)]
        say("  throughput ours/peer per rep: "
            + ", ".join(f"{x:.2f}x" for x in ratios)
            + f" (median {median(ratios):.2f}x)")
    unqueued = [(args.rate, args.seconds, "")]
    if args.floor_rate > 0:
        unqueued.append((args.floor_rate, args.floor_seconds, UNQUEUED))
    for rep in range(args.lat_repeat if "latency" in args.cases else 0):
        for rate, seconds, suffix in unqueued:
            for side in order_for(rep, args.sides):
                use_ours_worker(env, side, args.concurrency, args.batch_given,
                                args.lanes_given)
                r = asyncio.run(latency_once(env, side, rate, seconds, best))
                lat.setdefault(side + suffix, []).append(r)
                say(f"  latency rep {rep + 1} {side:8}{' ' + suffix if suffix else ''}: "
                    f"p50 {r['p50_ms']:6.1f} ms, p90 {r['p90_ms']:6.1f} ms, p99 "
                    f"{r['p99_ms']:7.1f} ms, max {r['max_ms']:7.1f} ms (p50 first/last tenth "
                    f"{r['first_tenth_p50_ms']:.1f}/{r['last_tenth_p50_ms']:.1f}), committed "
                    f"{r['committed_per_s']:.0f}/s, kept up: {r['kept_up']}, "
                    f"missing {r['missing']}")
                if r.get("legs"):
                    say("    legs p50 ms: " + legs_line(r["legs"]))
                    say("    legs p99 ms: " + legs_line(r["legs"], "p99_ms"))
    return tp, lat, raw, bound


def nats_numbers(args: argparse.Namespace) -> tuple[int, int]:
    """The batch size and lanes the nats side's relay runs with: the flags, else the NATS
    target's own defaults (``NatsTarget.relay_tuning``), else the library's."""
    import msgspec

    from outbox import RelaySettings
    from outbox.targets.nats import NatsTarget

    tuned = RelaySettings().tuned(**msgspec.structs.asdict(NatsTarget.relay_tuning))
    return (args.batch_given or int(tuned.batch_size),
            args.lanes_given or int(tuned.drain_lanes))


def lane_sweep(args: argparse.Namespace, env: Env, best: PeerConfig, say: Any) -> None:
    """Throughput runs of one of our worker sides (nats for ``--nats-sweep``, else the
    first of ``--sides`` that has a worker), one per ``LANES/BATCH`` setting in each
    repetition, the order rotating every repetition (settings compared in alternation
    on a noisy machine); prints each run and each setting's median."""
    side = "nats" if args.nats_sweep else next(
        (s for s in args.sides if s in WORKER_SIDES), "ours")
    sweep = args.nats_sweep or args.sweep
    settings = [tuple(int(x) for x in s.split("/")) for s in sweep.split(",")]
    runs: dict[tuple[int, ...], list[float]] = {s: [] for s in settings}
    say(f"sweep of the {side} side's drain_lanes/batch_size: {sweep}")
    for rep in range(args.repeat):
        shift = rep % len(settings)
        for lanes, batch in settings[shift:] + settings[:shift]:
            stop_ours_worker(env, side)
            use_ours_worker(env, side, args.concurrency, batch, lanes)
            r = asyncio.run(throughput_once(env, side, args.rows, best, args.timeout))
            runs[(lanes, batch)].append(r["per_s"])
            say(f"  sweep rep {rep + 1} lanes {lanes:2} batch {batch:4}: {r['per_s']:8,.0f} "
                f"rows/s ({r['seconds']:.2f} s, missing {r['missing']}, duplicates "
                f"{r['duplicates']})")
    for (lanes, batch), rates in runs.items():
        say(f"  sweep lanes {lanes:2} batch {batch:4}: median {median(rates):8,.0f} rows/s "
            "(" + ", ".join(f"{x:,.0f}" for x in rates) + ")")


def cpu_line(cpu: dict[str, float], seconds: float, rows: int) -> str:
    """Who used the cores during one of our throughput runs, and how many cores in all."""
    names = {"worker": "relay worker", "broker": "broker_lite", "postgres": "PostgreSQL",
             "harness": "this process (consumer, bound or floor)"}
    total = sum(cpu.values())
    return ("CPU s: " + ", ".join(f"{names.get(k, k)} {v:.2f}" for k, v in cpu.items())
            + f"; {total:.2f} in {seconds:.2f} s = {total / seconds:.2f} cores busy; "
            f"{total / rows * 1e6:.0f} us CPU a row")


def floors_text(floors: dict[str, Any], ours: float) -> str:
    """The relay+SQL and broker floors of one repetition, and ours over each."""
    relay, bench, shape = (floors["relay_sql"], floors["broker_tx_batch_async"],
                           floors["broker_relay_shape"])
    relay_cpu = sum(relay["cpu_s"].values()) / relay["rows"] * 1e6 if relay["cpu_s"] else 0.0
    return (f"relay+SQL (broker answered in-process) {relay['per_s']:,.0f} rows/s "
            f"({relay_cpu:.0f} us CPU a row, PostgreSQL and relay); broker alone "
            f"{bench['per_s']:,.0f} tx/s (tx-batch-async: {bench['per_request']} a batch, "
            f"{bench['window']} in flight; "
            f"{bench['broker_cpu_s'] / bench['transactions'] * 1e6:.0f} us broker CPU a tx), "
            f"{shape['per_s']:,.0f} tx/s (the relay's shape: {shape['per_request']} a batch, "
            f"{shape['window']} in flight; "
            f"{shape['broker_cpu_s'] / shape['transactions'] * 1e6:.0f} us); ours / relay+SQL "
            f"{ours / relay['per_s']:.2f}x, ours / broker {ours / bench['per_s']:.2f}x"
            + ceiling_text(floors.get("ceiling"), ours))


def ceiling_text(ceiling: dict[str, Any] | None, ours: float) -> str:
    """The machine's ceiling for our relay (:func:`_relay_floors.machine_ceiling`), ours over it."""
    if not ceiling:
        return ""
    parts = ceiling["cpu_us_per_row"]
    return (f"; machine ceiling {ceiling['per_s']:,.0f} rows/s ({ceiling['cores']} cores busy "
            f"with relay and PostgreSQL {parts['relay_and_postgres_us']:.0f} + broker "
            f"{parts['broker_us']:.0f} + consumer {parts['consumer_us']:.0f} us a row), "
            f"ours / ceiling {ours / ceiling['per_s']:.2f}x")


def legs_line(legs: dict[str, Any], key: str = "p50_ms") -> str:
    shown = [f"{name} {v:.1f}" for name, v in legs.get(key, {}).items() if v is not None]
    return ", ".join(shown) + f" ({legs['via_listener']}/{legs['rows']} rows via the listener)"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv, __doc__)
    if args.role == "ours-relay":
        return ours_relay_main(args)
    if args.role == "peer-relay":
        return asyncio.run(peer_relay_main(args))
    if args.role == "producer":
        return producer_main(args)
    exit_on_sigterm()  # the driver only: its servers and workers stop with it
    if args.render:
        render_saved("relay", markdown_section)
        return 0
    if "peer" in args.sides:
        require_peer()
    if args.enqueue_window is not None:
        os.environ[ENQUEUE_WINDOW_ENV] = str(args.enqueue_window)
    if args.listen is not None:
        os.environ[LISTEN_ENV] = "1" if args.listen else "0"
    if args.listen_lanes is not None:
        os.environ[LISTEN_LANES_ENV] = str(args.listen_lanes)
    if "rabbitmq" in args.sides:  # its own servers, first (bench/_relay_rabbitmq.py); printed
        from _relay_rabbitmq import rabbitmq_side

        with scratch_dir("relay-rabbitmq", keep=args.keep_logs) as work:
            rabbitmq_side(work, args.rows, args.repeat if "throughput" in args.cases else 0,
                          args.rate, args.seconds,
                          args.lat_repeat if "latency" in args.cases else 0, args.timeout,
                          print)
        args.sides = [s for s in args.sides if s != "rabbitmq"]
        if not args.sides:
            return 0
        args.restricted = True
    result = measure(args)
    if args.restricted:
        print("--cases/--sides subset: results not saved")
        return 0
    report(result)
    client = result.get("rocketmq_client")
    if client is not None:
        print(f"rocketmq target / official client: {client['ratio_median']:.2f}x (median of "
              f"{len(client['ratios'])}: " + ", ".join(f"{x:.2f}" for x in client["ratios"])
              + f"; target {client['target_per_s_median']:,.0f} rows/s, client "
              f"{client['raw_per_s_median']:,.0f} tx/s)")
    if args.quick:
        print("quick run: results not saved")
        return 0
    if "peer" in args.sides:
        name = f"relay-{args.save_as}" if args.save_as else "relay"
        path = save_result(name, result, markdown_section(result))
        print(f"wrote {path} and the {name} section of bench/README.md")
    if frozenset(args.sides) == {"rocketmq"}:
        path = save_result("relay-rocketmq-client", result, client_section(result))
        print(f"wrote {path} and the relay-rocketmq-client section of bench/README.md")
    elif "rocketmq" in args.sides:
        path = save_result("relay-rocketmq", result, rocketmq_section(result))
        print(f"wrote {path} and the relay-rocketmq section of bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
