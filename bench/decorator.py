"""Decorator benchmark: a Flask view with and without ``@transactional_message``.

Usage::

    .venv/bin/python bench/decorator.py [--requests N] [--repeat K] [--batches B]
                                        [--concurrency 1,4] [--frameworks flask,fastapi]
                                        [--quick]

The same four routes also run as async FastAPI views under uvicorn, on
psycopg's async driver (``bench/_fastapi_routes.py``), measured and reported
the same way (cases ``fastapi-c1`` ...); the Flask description below holds
for them with uvicorn (keep-alive) for werkzeug and an ``AsyncSession`` for
the session.

One Flask app, served by werkzeug's threaded WSGI server (a thread of this
process, TCP_NODELAY) on a free loopback port, in front of a private
PostgreSQL cluster (``tests/support/servers.start_postgres``); in the
``networked`` configuration through ``bench/_latency_proxy.py``. werkzeug
answers ``Connection: close``, so each request opens a new TCP connection
and a new server thread, for every route alike.
Three routes do the same business write, one ``INSERT`` into ``orders`` in
one transaction, and answer the same JSON:

* ``POST /bare``: a plain SQLAlchemy session, ``execute`` + ``commit``.
* ``POST /row``: the same, plus the outbox row written by hand in the same
  transaction: one plain-SQL ``INSERT`` into ``rocketbox_transaction`` with
  the columns ``publish()`` sets (``exec_driver_sql``, no decorator, no
  ``publish()``). It is the floor for any outbox that keeps the message as a
  row written by its own statement.
* ``POST /ride``: the same, with the outbox row sent by hand in the same
  query as the ``COMMIT`` (``SELECT rocketbox_publish(...); COMMIT``, sent
  the way the decorator sends it, psycopg's ``execute`` without parameters;
  every value hex or known, so nothing to quote): what the decorator does,
  with none of its Python. It is the floor for the decorator as built:
  decorated / ride is the decorator's own cost.
* ``POST /decorated``: the same view under
  ``@transactional_message(topic=..., body=...)`` (outbox mode): the order
  row and one outbox row commit together. No Celery
  (``ROCKETBOX_CELERY_BROKER = ""``), so the ``on_commit`` hook is empty and
  relaying is not in the timed path (``bench/relay.py`` measures the relay).

A client process (``http.client``, one connection object per client
thread, sequential requests per thread) drives the routes the same way.
Each repetition splits the N requests per route into batches and alternates
the routes' batches (forward, then reversed order), so drift hits all alike.
Per repetition it takes p50 and p99 latency of each route; the report gives
the medians over repetitions and the medians of the paired ratios
decorated / bare (1.00 = free; the goal is p50 <= 1.10x), row / bare (what
the extra statement costs), ride / bare (what the row costs when it rides
on the COMMIT) and decorated / ride (what the decorator and ``publish()``
cost on top of that).

Full runs write ``bench/results/decorator.json`` and the section of
``bench/README.md`` between the ``decorator`` markers; ``--quick`` only
prints.
"""


from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection as Pipe
from typing import Any

from _common import (
    RESULTS_DIR,
    add_repository_paths,
    describe_machine,
    git_state,
    load_average,
    median,
    render_saved,
    save_result,
    settle,
    utc_now,
)
from _decorator_app import make_app, orders_table, serve, stop_wsgi
from _decorator_client import client_main, percentile, run_batch
from _decorator_report import markdown_section

add_repository_paths()

ROUTES = ("bare", "row", "ride", "decorated")
#: ``durable``: PostgreSQL's own defaults, what a production server runs (every
#: COMMIT waits for its WAL fsync); ``no-fsync``: the test suite's throw-away
#: cluster, where COMMIT is nearly free and round trips are all that is left;
#: cluster; ``networked``: ``durable`` behind bench/_latency_proxy.py, which adds
#: NETWORK_DELAY_US each way, like a database on another host of the same zone
DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
PG_CONFIGS: dict[str, dict[str, str]] = {"durable": DURABLE, "no-fsync": {},
                                         "networked": DURABLE}
NETWORK_DELAY_US = 250
DELAYS_US = {"networked": NETWORK_DELAY_US}
TARGET_P50 = 1.10


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Each PostgreSQL configuration asked for, on its own fresh cluster."""
    return {"configs": {name: measure_config(args, name) for name in args.postgres}}


def round_trip_us(engine: Any) -> float:
    """Median time of ``SELECT 1`` on one connection, in µs (a round trip to the server)."""
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        times = []
        for _ in range(300):
            start = time.perf_counter_ns()
            raw.execute("SELECT 1").fetchone()
            times.append(time.perf_counter_ns() - start)
        conn.rollback()
    return median([t / 1000 for t in times])


def measure_config(args: argparse.Namespace, config: str) -> dict[str, Any]:
    from _latency_proxy import LatencyProxy
    from sqlalchemy import create_engine, text

    from outbox import migrate
    from tests.support.servers import start_postgres

    print(f"PostgreSQL configuration: {config}", flush=True)
    results: dict[str, Any] = {"cases": {}, "delay_us": DELAYS_US.get(config, 0)}
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(start_postgres(settings=PG_CONFIGS[config]))
        url = pg.url
        if results["delay_us"]:
            proxy_port = stack.enter_context(LatencyProxy((pg.host, pg.port),
                                                          results["delay_us"]))
            url = url.replace(f":{pg.port}/", f":{proxy_port}/")
        engine = create_engine(url, pool_size=max(args.concurrency) + 4, max_overflow=8,
                               pool_pre_ping=False)
        results["round_trip_us"] = round_trip_us(engine)
        print(f"  round trip (SELECT 1): {results['round_trip_us']:.0f} us", flush=True)
        migrate.upgrade(engine)
        orders_table().metadata.create_all(engine)
        with engine.connect() as conn:
            results["postgres_version"] = conn.execute(text("SHOW server_version")).scalar()
            results["postgres_settings"] = {
                name: conn.execute(text(f"SHOW {name}")).scalar()
                for name in ("fsync", "synchronous_commit", "full_page_writes",
                             "shared_buffers")}
        for framework in args.frameworks:
            if framework == "flask":
                server, port, thread = serve(make_app(engine))
                stop = functools.partial(stop_wsgi, server, thread)
            else:
                from _fastapi_routes import serve_fastapi

                port, stop = serve_fastapi(url, orders_table())
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe()
            client = ctx.Process(target=client_main, args=(child, port), daemon=True)
            client.start()
            prefix = "" if framework == "flask" else f"{framework}-"
            try:
                for c in args.concurrency:
                    for route in ROUTES:  # warm up: connections, pool, plans, caches
                        run_batch(parent, route, max(50, args.requests // 10), c)
                for c in args.concurrency:
                    case = run_case(parent, args, c)
                    case["framework"] = framework
                    results["cases"][f"{prefix}c{c}"] = case
            finally:
                parent.send(None)
                client.join(10)
                stop()
        engine.dispose()
    return results


def run_case(pipe: Pipe, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    per_batch = max(1, args.requests // args.batches)
    reps: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        settle()
        lat: dict[str, list[int]] = {r: [] for r in ROUTES}
        wall: dict[str, float] = dict.fromkeys(ROUTES, 0.0)
        for b in range(args.batches):
            order = ROUTES if (b + rep) % 2 == 0 else ROUTES[::-1]
            for route in order:
                got, elapsed = run_batch(pipe, route, per_batch, concurrency)
                lat[route].extend(got)
                wall[route] += elapsed
        row: dict[str, Any] = {}
        for route in ROUTES:
            s = sorted(lat[route])
            row[route] = {"requests": len(s), "p50_us": percentile(s, 0.50),
                          "p99_us": percentile(s, 0.99), "mean_us": sum(s) / len(s) / 1000,
                          "rps": len(s) / wall[route]}
        row["ratio_p50"] = row["decorated"]["p50_us"] / row["bare"]["p50_us"]
        row["ratio_p99"] = row["decorated"]["p99_us"] / row["bare"]["p99_us"]
        row["ratio_rps"] = row["bare"]["rps"] / row["decorated"]["rps"]
        row["row_ratio_p50"] = row["row"]["p50_us"] / row["bare"]["p50_us"]
        row["own_ratio_p50"] = row["decorated"]["p50_us"] / row["row"]["p50_us"]
        row["ride_ratio_p50"] = row["ride"]["p50_us"] / row["bare"]["p50_us"]
        row["over_ride_p50"] = row["decorated"]["p50_us"] / row["ride"]["p50_us"]
        reps.append(row)
        print(f"  c={concurrency} rep {rep + 1}/{args.repeat}: "
              + " | ".join(f"{r} p50 {row[r]['p50_us']:.0f} us p99 {row[r]['p99_us']:.0f} us "
                           f"{row[r]['rps']:.0f} req/s" for r in ROUTES)
              + f" | decorated/bare p50 x{row['ratio_p50']:.3f} p99 x{row['ratio_p99']:.3f}"
              f" | row/bare x{row['row_ratio_p50']:.3f} | ride/bare "
              f"x{row['ride_ratio_p50']:.3f} | decorated/ride x{row['over_ride_p50']:.3f}",
              flush=True)
    summary: dict[str, Any] = {"concurrency": concurrency, "requests_per_route": per_batch
                               * args.batches, "repetitions": reps}
    for route in ROUTES:
        summary[route] = {k: median([r[route][k] for r in reps])
                          for k in ("p50_us", "p99_us", "mean_us", "rps")}
    for k in ("ratio_p50", "ratio_p99", "ratio_rps", "row_ratio_p50", "own_ratio_p50",
              "ride_ratio_p50", "over_ride_p50"):
        vals = [r[k] for r in reps]
        summary[k] = median(vals)
        summary[k + "_range"] = [min(vals), max(vals)]
    summary["meets_p50_goal"] = summary["ratio_p50"] <= TARGET_P50
    return summary


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=None,
                        help="requests per route per repetition (default 2000)")
    parser.add_argument("--repeat", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--batches", type=int, default=10,
                        help="alternating batches per repetition (default 10)")
    parser.add_argument("--concurrency", default="1,4",
                        help="client threads, comma-separated (default 1,4)")
    parser.add_argument("--postgres", default="durable,no-fsync,networked",
                        help="PostgreSQL configurations, comma-separated: durable (its "
                             "defaults: fsync and synchronous_commit on) and no-fsync (the "
                             "test suite's cluster) and networked (durable behind a proxy that "
                             f"adds {NETWORK_DELAY_US} us each way); default all three")
    parser.add_argument("--frameworks", default="flask,fastapi",
                        help="apps to measure, comma-separated: flask (werkzeug, psycopg) "
                             "and fastapi (uvicorn, async routes on psycopg async); "
                             "default both")
    parser.add_argument("--quick", action="store_true",
                        help="300 requests, 3 repetitions; print only")
    parser.add_argument("--render", action="store_true",
                        help="re-render the README section from the JSON and exit")
    args = parser.parse_args(argv)
    args.concurrency = [int(x) for x in str(args.concurrency).split(",") if x]
    args.postgres = [x for x in str(args.postgres).split(",") if x]
    args.frameworks = [x for x in str(args.frameworks).split(",") if x]
    if set(args.frameworks) - {"flask", "fastapi"}:
        parser.error("--frameworks takes flask and fastapi")
    unknown = sorted(set(args.postgres) - set(PG_CONFIGS))
    if unknown:
        parser.error(f"unknown --postgres {', '.join(unknown)}; choose from "
                     f"{', '.join(PG_CONFIGS)}")
    if args.requests is None:
        args.requests = 300 if args.quick else 2000
    if args.repeat is None:
        args.repeat = 3 if args.quick else 5
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        render_saved("decorator", markdown_section)
        return 0
    result: dict[str, Any] = {
        "benchmark": "decorator",
        "started": utc_now(),
        "parameters": {"requests": args.requests, "repeat": args.repeat,
                       "batches": args.batches, "concurrency": args.concurrency,
                       "postgres": args.postgres, "frameworks": args.frameworks,
                       "quick": args.quick, "target_p50_ratio": TARGET_P50},
        "machine": describe_machine(RESULTS_DIR),
        "git": git_state(),
        "load_start": load_average(),
    }
    if result["load_start"] and result["load_start"][0] > (os.cpu_count() or 1):
        print(f"warning: machine busy at start (load {result['load_start']})")
    print(f"decorator benchmark: {args.requests} requests/route/rep, {args.repeat} reps, "
          f"clients {args.concurrency}", flush=True)
    result.update(measure(args))
    result["load_end"] = load_average()
    result["finished"] = utc_now()
    for name, case in ((f"{config} {case.get('framework', 'flask')} c{case['concurrency']}",
                        case)
                       for config, cfg in result["configs"].items()
                       for case in cfg["cases"].values()):
        print(f"{name}: p50 ratio {case['ratio_p50']:.3f}x {case['ratio_p50_range']} "
              f"(row/bare {case['row_ratio_p50']:.3f}x, ride/bare "
              f"{case['ride_ratio_p50']:.3f}x, decorated/ride {case['over_ride_p50']:.3f}x), "
              f"p99 ratio {case['ratio_p99']:.3f}x, bare {case['bare']['rps']:.0f} req/s, "
              f"decorated {case['decorated']['rps']:.0f} req/s, "
              f"goal {'met' if case['meets_p50_goal'] else 'missed'}")
    if not args.quick:
        out = save_result("decorator", result, markdown_section(result))
        print(f"wrote {out} and the decorator section of bench/README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
