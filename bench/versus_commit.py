"""Paired runs of today's code against an earlier commit: nothing got slower.

usage: python bench/versus_commit.py --rev REV [--rounds N] [--only broker,relay,import]

Each round runs both sides one after the other, alternating which goes first,
so a machine that gets busier or quieter during the run moves both alike:

* ``broker``: ``bench/broker.py --quick`` on the working tree and with
  ``--at-commit REV`` (the same harness, broker_lite as committed at REV); per
  case, ours msg/s and ours/Redis.
* ``relay``: each tree's own ``bench/relay.py --sides ours`` (the whole
  repository at REV is extracted; its relay, its harness), one throughput and one
  latency repetition per round; rows/s and commit-to-visible p50/p99, read from
  the lines both versions print.
* ``import``: ``python -X importtime -c "import outbox"`` in a fresh interpreter
  per tree, the cumulative microseconds of ``outbox``.

It prints, per figure, each side's median and the median of the per-round
ratios (today / REV; above 1.00 is faster for rates, slower for times), and
saves ``results/versus-REV.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import (
    JSON_OUT_ENV,
    REPO_ROOT,
    RESULTS_DIR,
    TMP_DIR,
    describe_machine,
    extract_commit,
    git_state,
    load_average,
    median,
    utc_now,
    write_json,
)

SIDES = ("today", "before")
_THROUGHPUT = re.compile(r"throughput rep \d+ ours\s*:\s*([\d,]+) rows/s")
_LATENCY = re.compile(r"latency rep \d+ ours\s*: p50\s+([\d.]+) ms, p90\s+[\d.]+ ms, "
                      r"p99\s+([\d.]+) ms")
_IMPORT = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|\s+outbox$", re.MULTILINE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rev", required=True, help="the earlier commit to run against")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds (default 5)")
    parser.add_argument("--only", default="broker,relay,import",
                        help="which comparisons, comma-separated (default all three)")
    parser.add_argument("--relay-rows", type=int, default=5000,
                        help="rows per relay throughput repetition (default 5000)")
    parser.add_argument("--relay-seconds", type=float, default=10.0,
                        help="length of a relay latency repetition (default 10)")
    args = parser.parse_args(argv)
    args.only = [w for w in str(args.only).split(",") if w]
    if set(args.only) - {"broker", "relay", "import"} or args.rounds < 1:
        parser.error("--only takes broker, relay, import; --rounds at least 1")
    return args


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    """Run one side; its combined output (a failing run stops the comparison)."""
    print(f"  $ {' '.join(cmd)}  (in {cwd})", flush=True)
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"versus_commit: {cmd[1]} exited {done.returncode} in {cwd}")
    return done.stdout + done.stderr


def _order(round_no: int) -> tuple[str, ...]:
    return SIDES if round_no % 2 == 0 else SIDES[::-1]


def broker_round(rev: str, round_no: int) -> dict[str, dict[str, Any]]:
    """One ``bench/broker.py --quick`` per side; per side, ``{case: {per_s, ratio}}``."""
    out: dict[str, dict[str, Any]] = {}
    for side in _order(round_no):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "result.json"
            cmd = [sys.executable, "bench/broker.py", "--quick"]
            if side == "before":
                cmd += ["--at-commit", rev]
            _run(cmd, cwd=REPO_ROOT, env=dict(os.environ, **{JSON_OUT_ENV: str(path)}))
            result = json.loads(path.read_text(encoding="utf-8"))
        out[side] = {c["name"]: {"per_s": c["ours"]["per_s"], "ratio": c["ratio_median"]}
                     for c in result["cases"]}
    return out


def relay_round(trees: dict[str, Path], args: argparse.Namespace, round_no: int
                ) -> dict[str, dict[str, float]]:
    """Each tree's own relay benchmark, ours only: rows/s, p50 and p99 (ms)."""
    out: dict[str, dict[str, float]] = {}
    for side in _order(round_no):
        tree = trees[side]
        env = dict(os.environ, PYTHONPATH=str(tree))
        text = _run([sys.executable, "bench/relay.py", "--sides", "ours", "--repeat", "1",
                     "--lat-repeat", "1", "--rows", str(args.relay_rows), "--seconds",
                     str(args.relay_seconds)], cwd=tree, env=env)
        rows = _THROUGHPUT.findall(text)
        lat = _LATENCY.findall(text)
        if not rows or not lat:
            raise SystemExit(f"versus_commit: no throughput/latency line from {tree}:\n"
                             f"{text[-2000:]}")
        out[side] = {"rows_per_s": float(rows[-1].replace(",", "")),
                     "p50_ms": float(lat[-1][0]), "p99_ms": float(lat[-1][1])}
    return out


def import_round(trees: dict[str, Path], round_no: int) -> dict[str, dict[str, float]]:
    """``import outbox`` in a fresh interpreter per tree: cumulative microseconds."""
    out: dict[str, dict[str, float]] = {}
    for side in _order(round_no):
        env = dict(os.environ, PYTHONPATH=str(trees[side]))
        text = _run([sys.executable, "-X", "importtime", "-c", "import outbox"],
                    cwd=trees[side], env=env)
        found = _IMPORT.findall(text)
        if not found:
            raise SystemExit(f"versus_commit: no import time for outbox from {trees[side]}")
        out[side] = {"import_us": float(found[-1])}
    return out


def summarize(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per figure: each side's median and the median of the per-round today/before ratios."""
    figures = sorted(set(rounds[0]["today"]) & set(rounds[0]["before"]))
    summary: dict[str, dict[str, Any]] = {}
    for fig in figures:
        today = [r["today"][fig] for r in rounds]
        before = [r["before"][fig] for r in rounds]
        ratios = [t / b for t, b in zip(today, before, strict=True) if b]
        summary[fig] = {"today": median(today), "before": median(before),
                        "ratio_median": median(ratios) if ratios else None,
                        "ratio_samples": ratios}
    return summary


def _flat_broker(per_side: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {side: {f"{case} {key}": value for case, figs in cases.items()
                   for key, value in figs.items()}
            for side, cases in per_side.items()}


def print_summary(title: str, summary: dict[str, dict[str, Any]]) -> None:
    print(f"\n{title}: today / before (median of per-round ratios)")
    for fig, s in summary.items():
        ratio = s["ratio_median"]
        shown = f"{ratio:6.3f}" if ratio is not None else "   n/a"
        print(f"  {fig:36} today {s['today']:12,.2f}  before {s['before']:12,.2f}  "
              f"ratio {shown}  spread {min(s['ratio_samples'], default=0):.3f}-"
              f"{max(s['ratio_samples'], default=0):.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = load_average()
    TMP_DIR.mkdir(parents=True, exist_ok=True)
    before_tree = TMP_DIR / f"versus-{os.getpid()}"
    commit = extract_commit(args.rev, ".", before_tree)
    trees = {"today": REPO_ROOT, "before": before_tree}
    print(f"today: working tree {git_state().get('commit', '?')}; before: {commit[:12]} "
          f"(extracted to {before_tree}); {args.rounds} rounds", flush=True)
    raw: dict[str, list[dict[str, dict[str, float]]]] = {w: [] for w in args.only}
    try:
        for n in range(args.rounds):
            print(f"round {n + 1}/{args.rounds}", flush=True)
            if "import" in args.only:
                raw["import"].append(import_round(trees, n))
            if "broker" in args.only:
                raw["broker"].append(_flat_broker(broker_round(args.rev, n)))
            if "relay" in args.only:
                raw["relay"].append(relay_round(trees, args, n))
    finally:
        shutil.rmtree(before_tree, ignore_errors=True)
    summaries = {what: summarize(rounds) for what, rounds in raw.items()}
    for what, summary in summaries.items():
        print_summary(what, summary)
    load_end = load_average()
    print(f"\nload average at start {load_start}, at the end {load_end}")
    path = RESULTS_DIR / f"versus-{commit[:7]}.json"
    write_json(path, {"benchmark": "versus_commit", "when": utc_now(), "today": git_state(),
                      "before": commit, "rounds": args.rounds,
                      "machine": describe_machine(REPO_ROOT),
                      "load_average": {"start": load_start, "end": load_end},
                      "relay_parameters": {"rows": args.relay_rows,
                                           "seconds": args.relay_seconds},
                      "summary": summaries, "raw": raw})
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
