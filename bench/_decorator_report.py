"""bench/decorator.py's README section: the results table and the analysis under it.

:func:`markdown_section` renders the ``decorator`` section of
bench/README.md from bench/results/decorator.json: the PostgreSQL
configurations, one row per configuration, app and client count, and
:data:`ANALYSIS`, the prose written by hand about the last full run.
"""

from __future__ import annotations

from typing import Any

from _common import machine_summary

__all__ = ["ANALYSIS", "markdown_section"]

ANALYSIS = """\
**Goal: met in one cell of six (durable, four clients, 1.10x, with a
0.97-1.31 range) and otherwise missed; on this machine it is out of reach
for any outbox that keeps the message as a row in the view's
transaction.** The `ride` route is that floor: the same view, plus only
the outbox row, sent by hand in the same query as the `COMMIT` exactly as
the decorator sends it, with none of the decorator's Python. It costs
1.10-1.12x (durable) and 1.11-1.15x (no-fsync) of the bare view on
loopback, and 1.08-1.09x with the database 0.8 ms away (`networked`). The
decorator adds 1.00-1.04x on top of it (decorated / ride). decorated /
bare comes out at 1.10-1.20x on loopback and 1.13x networked in this run;
the run before it gave 1.05x networked with one client. Single runs swing
by about 5% on this VM (see the per-repetition ranges), so read the floor
and the decorator's share, not one cell.

Why the row costs this much: the view does one `INSERT` (1.4-1.8 ms over
HTTP on loopback, most of it Flask, werkzeug and the new TCP connection
per request). The outbox row adds a PL/pgSQL call that inserts into a
table with four indexes and takes the sequence and the transaction id.
In a tight loop on a warm connection that is about 35-45 µs on the
server; between HTTP requests, with caches cold, the `ride` route's p50
is 200-300 µs above the bare one's on loopback in this run, a tenth or
more of the request. The `row` route (the row as its
own `INSERT`) pays that plus a round trip: 1.10-1.16x on loopback,
1.18-1.24x networked.

What the decorator costs itself (in-process phase timers, Flask test
client, no-fsync): taking the session and unit of work, the response
check, building the row and quoting the call come to about 40-70 µs per
request cold; the function call and `COMMIT` to about 50 µs more than a
bare `COMMIT`. Sending the query with libpq's `PQexec` instead of
psycopg's `execute` was about 3% faster and was dropped (docs/outbox.md:
it blocks gevent loops and skips psycopg's `BEGIN`). Dropping the
`created_at` and `group_seq` indexes, or a time-ordered `tx_id`, made no
difference that stood out of the noise.

What was cut to get here (profiles: cProfile of the view through Flask's
test client, per-phase timers around the session calls, and py-spy):

* `publish()` built a Core `insert()` per call; statement construction,
  cache-key generation and bind processing cost more than PostgreSQL spent
  on the row. On psycopg/psycopg2 it now runs one plain-SQL `INSERT`
  (built once from the table's columns) through `exec_driver_sql`, with
  `seq` and `pg_xid` computed by the server in the same statement. The
  earlier separate `SELECT pg_current_xact_id()` is gone. Together: 1.41x
  -> about 1.18x on loopback.
* The Flask decorator looks the session's connection up once per
  transaction, and its settings without taking a lock once built.
* The `body=` row rides on the `COMMIT` (docs/outbox.md "Rows sent with the
  COMMIT"): networked, the decorated view is 0.91-0.93x the `row` route,
  which pays the round trip.
* Small ones: literals are quoted in Python (quotes doubled, `E'...'`
  when there is a backslash) rather than by libpq per value, and `tx_id`
  comes from `os.urandom` without building a `uuid.UUID`.

Tried and dropped:

* psycopg's pipeline mode for the `INSERT` and the `COMMIT`: psycopg syncs
  on `commit()` and again when the pipeline closes, so it is still two
  round trips (two-statement transaction: 620 µs plain, 680 µs pipelined).
* The row as a literal `INSERT` before the `COMMIT`, in one query: planning
  the unprepared `INSERT` costs about as much as the round trip it saves.
* `PREPARE` once per session, then `EXECUTE ...; COMMIT`: about 30-50 µs
  cheaper than the function per transaction here. But a SQL-level prepared
  statement lives in one server session, and behind PgBouncer in
  transaction mode the next transaction may run on another one; the
  missing statement would then abort the application's transaction.

The `networked` configuration puts `bench/_latency_proxy.py` between the
app and PostgreSQL (250 µs each way, plus the proxy's own scheduling: the
round trip measured in the table). Relaying is not in the timed path (no
Celery, empty `on_commit`); `bench/relay.py` measures the relay. To
reproduce: `.venv/bin/python bench/decorator.py` (about 12 minutes for the
three configurations; `--postgres durable`, `no-fsync` or `networked` for
one; `--quick` for a smoke run that only prints).
"""


def markdown_section(result: dict[str, Any]) -> str:
    p = result["parameters"]
    lines = [
        f"Run {result['finished']} at commit `{(result['git']['commit'] or '?')[:12]}`"
        + (f" (uncommitted: {', '.join(result['git']['dirty_paths'])})"
           if result["git"]["dirty_paths"] else "") + ".",
        "",
        f"Machine: {machine_summary(result['machine'])}. Load average at start "
        f"{result['load_start']}, at end {result['load_end']}.",
        "",
        "PostgreSQL " + "; ".join(
            f"{name}: {cfg['postgres_version']}, fsync={cfg['postgres_settings']['fsync']}, "
            f"synchronous_commit={cfg['postgres_settings']['synchronous_commit']}, round trip "
            f"{cfg['round_trip_us']:.0f} µs"
            + (f" (through the proxy, {cfg['delay_us']} µs each way)" if cfg["delay_us"] else "")
            for name, cfg in result["configs"].items())
        + " (private clusters from `tests/support/servers.start_postgres`, data on the "
        f"same disk). {p['requests']} requests per route per repetition, in {p['batches']} "
        f"alternating batches, {p['repeat']} repetitions; medians over repetitions, "
        "ratios are medians of the per-repetition ratios (range in brackets).",
        "",
        "| PostgreSQL | app | clients | bare p50 | row p50 | ride p50 | decorated p50 "
        "| **decorated / bare p50** | row / bare p50 | ride / bare p50 "
        "| decorated / ride p50 | bare p99 | decorated p99 | p99 ratio "
        "| bare req/s | decorated req/s | goal p50 <= 1.10x |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for config, case in ((name, case) for name, cfg in result["configs"].items()
                         for case in cfg["cases"].values()):
        b, r, d = case["bare"], case["row"], case["decorated"]
        ride = case.get("ride")  # runs before the ride route have none
        ride_cells = (f"{ride['p50_us']:.0f} µs", f"{case['ride_ratio_p50']:.2f}x",
                      f"{case['over_ride_p50']:.2f}x") if ride else ("-", "-", "-")
        lo, hi = case["ratio_p50_range"]
        lo9, hi9 = case["ratio_p99_range"]
        lines.append(
            f"| {config} | {case.get('framework', 'flask')} | {case['concurrency']} "
            f"| {b['p50_us']:.0f} µs | {r['p50_us']:.0f} µs | "
            f"{ride_cells[0]} | {d['p50_us']:.0f} µs | **{case['ratio_p50']:.2f}x** "
            f"({lo:.2f}-{hi:.2f}) | {case['row_ratio_p50']:.2f}x | {ride_cells[1]} | "
            f"{ride_cells[2]} | "
            f"{b['p99_us']:.0f} µs | {d['p99_us']:.0f} µs | {case['ratio_p99']:.2f}x "
            f"({lo9:.2f}-{hi9:.2f}) | {b['rps']:.0f} | {d['rps']:.0f} | "
            f"{'met' if case['meets_p50_goal'] else 'missed'} |")
    lines += ["", ANALYSIS.strip()]
    return "\n".join(lines)
