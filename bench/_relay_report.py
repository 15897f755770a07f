"""bench/relay.py's results: the summary of the runs, the printed report, the README sections.

:func:`summarise` turns the runs of every side into the result document
(medians, paired ratios, targets) that bench/results/relay.json holds;
:func:`report` prints it; :func:`markdown_section` and
:func:`rocketmq_section` render the ``relay`` and ``relay-rocketmq``
sections of bench/README.md from it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from _common import Samples, machine_summary, median
from _relay_common import BACKLOG_TX, BODY_SIZE, SIDES
from _relay_ours import celery_settings
from _relay_peer import PeerConfig
from _relay_rocketmq import ratio_of_pairs
from _relay_runs import WARMUP_SECONDS
from _report import load_text, markdown_targets

__all__ = [
    "BAR_BOUND",
    "TARGET_P99_MS",
    "TARGET_RATIO",
    "UNQUEUED",
    "markdown_section",
    "report",
    "rocketmq_section",
    "rocketmq_summary",
    "run_header",
    "summarise",
]

TARGET_RATIO = 2.0
TARGET_P99_MS = 50.0
#: issue 31's bars: ours over the peer at ``--rate``, and ours over the SQL-only bound
BAR_P50, BAR_P99, BAR_BOUND = 0.7, 0.5, 0.5
#: the suffix of a side's runs at ``--floor-rate`` (``lat["ours" + UNQUEUED]``)
UNQUEUED = "unqueued"


def summarise(args: argparse.Namespace, tp: dict[str, list[dict[str, Any]]],
              lat: dict[str, list[dict[str, Any]]], best: PeerConfig,
              trials: list[dict[str, Any]]) -> dict[str, Any]:
    def tp_side(runs: list[dict[str, Any]]) -> dict[str, Any]:
        rates = Samples([r["per_s"] for r in runs])
        return {"per_s": rates.median, "spread": rates.spread,
                "missing": sum(r["missing"] for r in runs),
                "duplicates": sum(r["duplicates"] for r in runs), "runs": runs}

    def lat_side(runs: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {k: median([r[k] for r in runs])
                               for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms",
                                         "committed_per_s")}
        out["kept_up_all"] = all(r["kept_up"] for r in runs)
        out["missing"] = sum(r["missing"] for r in runs)
        out["duplicates"] = sum(r["duplicates"] for r in runs)
        out["runs"] = runs
        return out

    ratios = [o["per_s"] / p["per_s"] if p["per_s"] else float("inf")
              for o, p in zip(tp["ours"], tp["peer"], strict=True)] if tp["peer"] else []
    ours_lat = lat_side(lat["ours"]) if lat["ours"] else None
    peer_lat = lat_side(lat["peer"]) if lat["peer"] else None
    targets = [{"description": "throughput: ours / best peer setting", "target": TARGET_RATIO,
                "measured": median(ratios), "unit": "x",
                "met": median(ratios) >= TARGET_RATIO}] if ratios else []
    if ours_lat is not None:
        targets.append({"description": f"ours p99 commit-to-visible at {args.rate:.0f} tx/s",
                        "target": TARGET_P99_MS, "measured": ours_lat["p99_ms"], "unit": "ms",
                        "met": ours_lat["p99_ms"] <= TARGET_P99_MS and ours_lat["kept_up_all"]})
    if ratios:
        targets.append({"description": "throughput: ours / best peer setting (issue 31)",
                        "target": 3.0, "measured": median(ratios), "unit": "x",
                        "met": median(ratios) >= 3.0})
    if ours_lat is not None and peer_lat is not None:
        for key, bar in (("p50_ms", BAR_P50), ("p99_ms", BAR_P99)):
            paired = median(ratio_of_pairs(lat["ours"], lat["peer"], key))
            targets.append({"description": f"ours / peer {key.removesuffix('_ms')} "
                                           f"commit-to-visible at {args.rate:.0f} tx/s "
                                           "(issue 31)",
                            "target": bar, "measured": paired, "unit": "x",
                            "met": paired <= bar})
    return {
        "parameters": {
            "rows": args.rows, "repeat": args.repeat, "rate": args.rate,
            "seconds": args.seconds, "latency_repeat": args.lat_repeat,
            "floor_rate": args.floor_rate, "floor_seconds": args.floor_seconds,
            "latency_warmup_seconds": WARMUP_SECONDS,
            "body_size": BODY_SIZE, "backlog_rows_per_tx": BACKLOG_TX,
            "ours": {"celery_pool": "threads", "concurrency": args.concurrency,
                     "relay_batch_size": args.batch_size,
                     "relay_drain_lanes": args.drain_lanes, "processes": 1,
                     "throughput_trigger": "one rocketbox.sweep task (Relay.drain)",
                     "latency_path": "on_commit hook -> rocketbox.relay tasks, coalesced "
                                     "per enqueue_window",
                     "enqueue_window_s": celery_settings().enqueue_window,
                     "broker_flush": "async", "celery_broker": "redis"},
            "peer": {"config": dataclasses.asdict(best), "processes": 1,
                     "driver": "asyncpg (LISTEN/NOTIFY)", "bus": "Redis stream (XADD)",
                     "handler": "async def relay(message: dict) -> dict: return message",
                     "tuning_rows": args.tune_rows, "tuning": trials},
            "redis_persistence": "none (tests.support.servers.start_redis)",
            "postgres_settings": "tests.support.servers.start_postgres: fsync=off, "
                                 "synchronous_commit=off, full_page_writes=off",
        },
        "throughput": {"ours": tp_side(tp["ours"]) if tp["ours"] else None,
                       "peer": tp_side(tp["peer"]) if tp["peer"] else None,
                       "ratio_meaning": "ours rows/s / peer rows/s, median of paired reps",
                       "ratio_median": median(ratios) if ratios else None,
                       "ratio_samples": ratios},
        "latency": {"ours": ours_lat, "peer": peer_lat,
                    "ratio_meaning": "ours / peer of paired repetitions, median (below 1: "
                                     "ours is faster)",
                    "ratios": {key: {"median": median(x), "samples": x}
                               for key in ("p50_ms", "p99_ms")
                               for x in [ratio_of_pairs(lat["ours"], lat["peer"], key)]}
                    if lat["ours"] and lat["peer"] else {}},
        "unqueued": unqueued_summary(args, lat, lat_side, ours_lat, peer_lat),
        "rocketmq": rocketmq_summary(tp, lat, tp_side, lat_side),
        "targets": targets,
    }


def unqueued_summary(args: argparse.Namespace, lat: dict[str, list[dict[str, Any]]],
                     lat_side: Any, ours_lat: dict[str, Any] | None,
                     peer_lat: dict[str, Any] | None) -> dict[str, Any] | None:
    """Both sides at ``--floor-rate``, where no row waits for another, beside issue 31's
    latency bars (0.7x the peer's p50 and 0.5x its p99 at ``--rate``)."""
    ours, peer = lat.get("ours" + UNQUEUED), lat.get("peer" + UNQUEUED)
    if not ours or not peer or ours_lat is None or peer_lat is None:
        return None
    o, p = lat_side(ours), lat_side(peer)
    bars = {"p50_ms": BAR_P50 * peer_lat["p50_ms"], "p99_ms": BAR_P99 * peer_lat["p99_ms"]}
    return {"meaning": f"commit-to-visible at {args.floor_rate:.0f} tx/s offered "
                       f"({args.floor_seconds:.0f} s runs, median of {len(ours)}): no row "
                       "waits for another's pass, so each side's p50 is its floor here; "
                       f"bars: the issue's p50 <= {BAR_P50}x and p99 <= {BAR_P99}x the "
                       f"peer's at {args.rate:.0f} tx/s, in ms",
            "rate": args.floor_rate, "seconds": args.floor_seconds, "ours": o, "peer": p,
            "bars_ms": bars,
            "ours_within_bar": {k: o[k] <= v for k, v in bars.items()}}


def rocketmq_summary(tp: dict[str, list[dict[str, Any]]], lat: dict[str, list[dict[str, Any]]],
                     tp_side: Any, lat_side: Any) -> dict[str, Any] | None:
    """The rocketmq side's figures, and its ratios to ours (medians of paired repetitions)."""
    if not tp["rocketmq"] and not lat["rocketmq"]:
        return None
    out: dict[str, Any] = {
        "meaning": "rocketmq / ours: rows/s (below 1 is slower), p50 and p99 (above 1 is "
                   "slower); medians of the ratios of paired repetitions",
        "throughput": tp_side(tp["rocketmq"]) if tp["rocketmq"] else None,
        "latency": lat_side(lat["rocketmq"]) if lat["rocketmq"] else None, "ratios": {}}
    if tp["rocketmq"] and tp["ours"]:
        samples = ratio_of_pairs(tp["rocketmq"], tp["ours"], "per_s")
        out["ratios"]["rows_per_s"] = {"median": median(samples), "samples": samples}
    if lat["rocketmq"] and lat["ours"]:
        for key in ("p50_ms", "p99_ms"):
            samples = ratio_of_pairs(lat["rocketmq"], lat["ours"], key)
            out["ratios"][key] = {"median": median(samples), "samples": samples}
    return out


def report(result: dict[str, Any]) -> None:
    tp, lat = result["throughput"], result["latency"]
    print()
    print(f"throughput (rows/s, median of {result['parameters']['repeat']}):")
    if tp["peer"] is not None:
        print(f"  ours {tp['ours']['per_s']:10,.0f}   peer {tp['peer']['per_s']:10,.0f}   "
              f"ours/peer {tp['ratio_median']:.2f}x (range {min(tp['ratio_samples']):.2f}-"
              f"{max(tp['ratio_samples']):.2f})")
    rmq = result.get("rocketmq")
    if rmq is not None:
        for key, r in rmq["ratios"].items():
            print(f"  rocketmq/ours {key}: {r['median']:.2f}x (samples "
                  + ", ".join(f"{x:.2f}" for x in r["samples"]) + ")")
    if lat["ours"] is not None:
        print(f"latency at {result['parameters']['rate']:.0f} tx/s offered (ms, medians):")
        sides = {**lat, "rocketmq": rmq["latency"] if rmq else None}
        for side in (s for s in SIDES if sides.get(s) is not None):
            s = sides[side]
            print(f"  {side:8} p50 {s['p50_ms']:7.1f}  p99 {s['p99_ms']:7.1f}  max "
                  f"{s['max_ms']:7.1f}  committed {s['committed_per_s']:.0f}/s  kept up: "
                  f"{s['kept_up_all']}")
    for line in floor_lines(result):
        print(line)
    for t in result["targets"]:
        print(f"target: {t['description']}: goal {t['target']}{t['unit']}, measured "
              f"{t['measured']:.2f}{t['unit']}: {'met' if t['met'] else 'NOT met'}")


def run_header(result: dict[str, Any]) -> list[str]:
    """The first lines of a section: when, which code, which machine and how loaded."""
    commit = (result["code"].get("commit") or "?")[:12]
    return [f"Last full run: {result['generated_at']}, working tree at `{commit}`.",
            f"Machine: {machine_summary(result['machine'])}; load average "
            f"{load_text(result['load_average'])}."]


def markdown_section(result: dict[str, Any]) -> str:
    p = result["parameters"]
    tp, lat = result["throughput"], result["latency"]
    peer_cfg = p["peer"]["config"]
    v = result["versions"]
    lines = [
        *run_header(result),
        f"Peer: faststream-outbox {v.get('faststream-outbox', '?')}, faststream "
        f"{v.get('faststream', '?')}, asyncpg {v.get('asyncpg', '?')}; setting used "
        f"max_workers={peer_cfg['max_workers']}, fetch_batch_size="
        f"{peer_cfg['fetch_batch_size']}, terminal_flush_batch_size="
        f"{peer_cfg['terminal_flush_batch_size']} (best of the settings tried, below). "
        f"Ours: one Celery worker, threads pool, concurrency {p['ours']['concurrency']}, "
        f"relay batch_size {p['ours']['relay_batch_size']}, drain_lanes "
        f"{p['ours'].get('relay_drain_lanes', 1)}; celery {v.get('celery', '?')}.",
        "",
        f"| throughput, {p['rows']:,} committed rows | rows/s (median of {p['repeat']}) "
        "| spread | missing | duplicates |",
        "|---|---:|---:|---:|---:|",
    ]
    for side, label in (("ours", "ours (Celery sweep -> broker_lite)"),
                        ("peer", "faststream-outbox (-> Redis stream)")):
        s = tp[side]
        lines.append(f"| {label} | {s['per_s']:,.0f} | {s['spread']:.0%} | {s['missing']} | "
                     f"{s['duplicates']} |")
    lines.append(f"| **ours / peer** | **{tp['ratio_median']:.2f}x** (range "
                 f"{min(tp['ratio_samples']):.2f}-{max(tp['ratio_samples']):.2f}) | | | |")
    if lat["ours"] is not None:
        lines += [
            "",
            f"| commit-to-visible at {p['rate']:.0f} tx/s offered, {p['seconds']:.0f} s "
            f"(median of {p['latency_repeat']}) | p50 ms | p90 ms | p99 ms | max ms "
            "| committed tx/s | kept up |",
            "|---|---:|---:|---:|---:|---:|:---:|",
        ]
        for side in ("ours", "peer"):
            s = lat[side]
            lines.append(f"| {side} | {s['p50_ms']:.1f} | {s['p90_ms']:.1f} | "
                         f"{s['p99_ms']:.1f} | {s['max_ms']:.1f} | {s['committed_per_s']:.0f} "
                         f"| {'yes' if s['kept_up_all'] else 'no'} |")
    trials = p["peer"]["tuning"]
    if trials:
        lines += ["", f"Peer settings tried ({p['peer']['tuning_rows']:,} rows, one run each): "
                  + ", ".join(f"{t['label']}: {t['per_s']:,.0f} rows/s" for t in trials)
                  + " (max_workers/fetch_batch_size/terminal_flush_batch_size)."]
    lines += ["", *floor_lines(result, markdown=True)]
    lines += markdown_targets(result["targets"], _target_cell)
    return "\n".join(lines)


def floor_lines(result: Mapping[str, Any], *, markdown: bool = False) -> list[str]:
    """The paired latency ratios, our legs and the SQL-only bound (text or Markdown)."""
    out: list[str] = []
    ratios = result["latency"].get("ratios") or {}
    if ratios:
        out.append("latency ours/peer (median of paired reps): " + ", ".join(
            f"{k.removesuffix('_ms')} {r['median']:.2f}x ("
            + ", ".join(f"{x:.2f}" for x in r["samples"]) + ")" for k, r in ratios.items()))
    legs = result.get("legs") or {}
    shown = {k: v for k, v in (legs.get("p50_ms") or {}).items() if v is not None}
    if shown:
        if markdown:
            out += ["", "| leg of our commit-to-visible (median of the runs' p50) | ms |",
                    "|---|---:|", *(f"| {k} | {v:.2f} |" for k, v in shown.items()), ""]
        else:
            out.append("our legs, p50 ms (median of runs): "
                       + ", ".join(f"{k} {v:.2f}" for k, v in shown.items()))
    bound = result.get("sql_bound")
    if bound:
        out.append(f"SQL-only bound (claim SKIP LOCKED + mark relayed per batch, no broker): "
                   f"{bound['per_s_median']:,.0f} rows/s; ours/bound "
                   f"{bound['ratio_median']:.2f}x ("
                   + ", ".join(f"{x:.2f}" for x in bound["ratios"]) + ")")
        floors = bound.get("floors")
        if floors:
            out.append(f"floors (medians, bench/_relay_floors.py): our relay with the broker "
                       f"answered in-process {floors['relay_sql_per_s_median']:,.0f} rows/s; "
                       f"broker_lite alone {floors['broker_tx_batch_async_per_s_median']:,.0f} "
                       f"tx/s (tx-batch-async), "
                       f"{floors['broker_relay_shape_per_s_median']:,.0f} tx/s (the relay's "
                       "batches)")
            if floors.get("ceiling_per_s_median"):
                out.append(
                    f"machine ceiling for our relay (the floors' CPU per row added up, every "
                    f"core busy): {floors['ceiling_per_s_median']:,.0f} rows/s; ours / ceiling "
                    f"{median(floors['ours_over_ceiling']):.2f}x; the bar {BAR_BOUND}x of the "
                    f"SQL-only bound is {BAR_BOUND * bound['per_s_median']:,.0f} rows/s")
    unq = result.get("unqueued")
    if unq:
        o, p, bars = unq["ours"], unq["peer"], unq["bars_ms"]
        out.append(
            f"with no queueing ({unq['rate']:.0f} tx/s offered, medians): ours p50 "
            f"{o['p50_ms']:.1f} ms, p99 {o['p99_ms']:.1f} ms; peer p50 {p['p50_ms']:.1f} ms, "
            f"p99 {p['p99_ms']:.1f} ms. Bars at {result['parameters']['rate']:.0f} tx/s: "
            + ", ".join(f"{k.removesuffix('_ms')} {v:.1f} ms (ours with no queueing "
                        f"{'within' if unq['ours_within_bar'][k] else 'above'})"
                        for k, v in bars.items()))
    out.append(f"our wake-up listener (--listen): {'on' if result.get('listen') else 'off'}")
    return out


def _target_cell(target: Mapping[str, Any], key: str) -> str:
    """The goal as given (``50ms``), the measured value to two decimals (``12.34ms``)."""
    return f"{target[key]:{'g' if key == 'target' else '.2f'}}{target['unit']}"


def rocketmq_section(result: dict[str, Any]) -> str:
    """bench/README.md's ``relay-rocketmq`` section: our relay, native door and RocketMQ target."""
    p, rmq = result["parameters"], result["rocketmq"]
    lines = [
        *run_header(result),
        "Both sides: one Celery worker, threads pool, "
        f"concurrency {p['ours']['concurrency']}, relay batch_size "
        f"{p['ours']['relay_batch_size']}; throughput {p['rows']:,} rows (median of "
        f"{p['repeat']}), latency {p['rate']:.0f} tx/s offered for {p['seconds']:.0f} s "
        f"(median of {p['latency_repeat']}).",
        "",
        "| side | rows/s | p50 ms | p99 ms | kept up | missing | duplicates |",
        "|---|---:|---:|---:|:---:|---:|---:|",
    ]
    for label, t, la in (("ours -> broker_lite native door", result["throughput"]["ours"],
                          result["latency"]["ours"]),
                         ("ours -> RocketMQ 5 target (official client, strict proxy mode)",
                          rmq["throughput"], rmq["latency"])):
        missing = (t["missing"] if t else 0) + (la["missing"] if la else 0)
        dup = (t["duplicates"] if t else 0) + (la["duplicates"] if la else 0)
        lines.append(f"| {label} | {t['per_s']:,.0f} | {la['p50_ms']:.1f} | {la['p99_ms']:.1f} "
                     f"| {'yes' if la['kept_up_all'] else 'no'} | {missing} | {dup} |"
                     if t and la else f"| {label} | - | - | - | - | {missing} | {dup} |")
    r = rmq["ratios"]
    cells = [f"**{r[k]['median']:.2f}x** ({min(r[k]['samples']):.2f}-"
             f"{max(r[k]['samples']):.2f})" if k in r else "-"
             for k in ("rows_per_s", "p50_ms", "p99_ms")]
    lines.append(f"| **RocketMQ target / native** | {cells[0]} | {cells[1]} | {cells[2]} "
                 "| | | |")
    return "\n".join(lines)
