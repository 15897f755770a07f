"""Console overhead: bench/relay.py's figures for our relay, with the console open and without.

Usage::

    .venv/bin/python bench/console.py [--rows N] [--repeat K] [--rate R] [--seconds S] [--quick]

It reuses bench/relay.py's harness (one private PostgreSQL, Redis, broker_lite,
our Celery relay worker, the same producers and consumer) and measures only
our side, in two conditions, interleaved and the order flipping every
repetition:

* **off**: nothing else runs;
* **on**: ``rocketbox console`` runs as its own process on the same database
  and broker (default ``--sample-seconds 5``), and a headless Chromium keeps
  its overview open (the cards and charts poll every sample period), as an
  operator would leave it during the whole measurement.

Each repetition runs relay.py's throughput case (a backlog of N rows relayed
from one sweep) and its latency case (``--rate`` commits per second for
``--seconds``; commit-to-visible p50 and p99). The ratios on/off are medians
of the paired ratios; the goal is that none of the figures moves by more
than 5%. Full runs write ``bench/results/console.json`` and the ``console``
section of ``bench/README.md``; ``--quick`` only prints.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from _common import (
    REPO_ROOT,
    git_state,
    load_average,
    machine_summary,
    median,
    save_result,
    scratch_dir,
)
from _relay_common import READY_TIMEOUT, Env
from _relay_ours import start_ours_worker, stop_ours_worker
from _relay_peer import PeerConfig
from _relay_runs import harness, latency_once, throughput_once
from _report import announce, result_head

from procgroup import Process  # after _relay_common, which puts the checkout on sys.path

TARGET = 0.05
READY = re.compile(r"rocketbox console ready url=(\S+)")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Opened:
    """The console open on its overview: its URL, and the roots of the two process trees."""

    url: str
    console_pid: int
    browser_pid: int  # chromedriver, the parent of every Chromium process

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system) used so far by the console's and the browser's trees."""
        return {"console": tree_cpu_seconds(self.console_pid),
                "browser": tree_cpu_seconds(self.browser_pid)}


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and its live descendants, from ``/proc``."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


@contextlib.contextmanager
def console_open(env: Env, sample_seconds: float) -> Iterator[Opened]:
    """``rocketbox console`` in its own process, and Chromium on its overview."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    argv = [sys.executable, "-m", "outbox", "console", "--db", env.db, "--broker", env.broker,
            "--port", "0", "--sample-seconds", str(sample_seconds), "--log-level", "WARNING"]
    log = env.work / f"console-{uuid.uuid4().hex[:8]}.log"  # fresh: an old one names an old port
    proc = Process(argv, log=log, name="rocketbox console",
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}).start()
    profile = tempfile.mkdtemp(prefix="bench-console-chromium-")
    driver = None
    try:
        found = proc.wait_for(READY, READY_TIMEOUT)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync",
                     f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
        driver.get(found[1] + "/")
        # measure the page left open, not its start: wait until the first sample is drawn
        WebDriverWait(driver, READY_TIMEOUT).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-throughput canvas"))
        yield Opened(found[1], proc.pid, driver.service.process.pid)
    finally:
        if driver is not None:
            driver.quit()
        proc.stop(timeout=20)
        shutil.rmtree(profile, ignore_errors=True)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    with scratch_dir("console") as work:
        machine = announce("console overhead", work)
        load_before = load_average()
        runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
        with harness(work, "consolebench") as env:
            start_ours_worker(env, args.concurrency, args.batch_size, args.drain_lanes)
            try:
                for rep in range(args.repeat):
                    for mode in (("off", "on") if rep % 2 == 0 else ("on", "off")):
                        with contextlib.ExitStack() as stack:
                            opened = (stack.enter_context(console_open(env, args.sample_seconds))
                                      if mode == "on" else None)
                            cpu_before = opened.cpu_seconds() if opened else {}
                            started = time.monotonic()
                            tp = asyncio.run(throughput_once(env, "ours", args.rows,
                                                             PeerConfig(), args.timeout))
                            lat = asyncio.run(latency_once(env, "ours", args.rate,
                                                           args.seconds, PeerConfig()))
                            wall = time.monotonic() - started
                            # the share of one core each tree used while the relay was measured
                            used = ({k: round((v - cpu_before[k]) / wall, 4)
                                     for k, v in opened.cpu_seconds().items()} if opened else {})
                        runs[mode].append({"throughput": tp, "latency": lat, "cpu_share": used})
                        print(f"  rep {rep + 1} console {mode:3}: {tp['per_s']:8,.0f} rows/s, "
                              f"p50 {lat['p50_ms']:6.1f} ms, p99 {lat['p99_ms']:7.1f} ms "
                              f"(missing {tp['missing']}/{lat['missing']})"
                              + "".join(f", {k} {v:.1%} of a core" for k, v in used.items()))
            finally:
                stop_ours_worker(env)
    return summarise(args, runs, machine, load_before)


def _paired(runs: dict[str, list[dict[str, Any]]], case: str, key: str) -> list[float]:
    return [on[case][key] / off[case][key] if off[case][key] else float("nan")
            for on, off in zip(runs["on"], runs["off"], strict=True)]


def summarise(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]],
              machine: dict[str, Any], load_before: list[float]) -> dict[str, Any]:
    figures = {}
    for label, case, key in (("throughput rows/s", "throughput", "per_s"),
                             ("latency p50 ms", "latency", "p50_ms"),
                             ("latency p99 ms", "latency", "p99_ms")):
        ratios = _paired(runs, case, key)
        figures[label] = {
            "off_median": median([r[case][key] for r in runs["off"]]),
            "on_median": median([r[case][key] for r in runs["on"]]),
            "ratio_on_off_median": median(ratios), "ratios": ratios,
            # throughput must not drop, latency must not grow, by more than TARGET
            "within_target": (median(ratios) >= 1 - TARGET if case == "throughput"
                              else median(ratios) <= 1 + TARGET),
        }
    return {**result_head("console", git_state(), machine, load_before),
            "parameters": {k: v for k, v in vars(args).items() if k != "quick"},
            "target": f"each figure within {TARGET:.0%} with the console open",
            "figures": figures, "cpu_share": {
                name: median([r["cpu_share"][name] for r in runs["on"]])
                for name in ("console", "browser")}, "runs": runs}


def markdown_section(result: dict[str, Any]) -> str:
    load = result["load_average"]
    lines = [f"Machine: {machine_summary(result['machine'])}; load average "
             f"{load['start'][0] if load['start'] else '?'} at start, "
             f"{load['end'][0] if load['end'] else '?'} at the end. "
             f"{result['parameters']['repeat']} repetitions each way.", "",
             "| figure | console off | console open | on/off (median of pairs) | "
             "within 5% |", "|---|---:|---:|---:|---|"]
    for label, f in result["figures"].items():
        spread = ", ".join(f"{r:.2f}" for r in f["ratios"])
        lines.append(f"| {label} | {f['off_median']:,.1f} | {f['on_median']:,.1f} | "
                     f"{f['ratio_on_off_median']:.3f} ({spread}) | "
                     f"{'yes' if f['within_target'] else 'no'} |")
    share = result.get("cpu_share")
    if share:
        lines += ["", f"While the relay was measured with the console open, the console process "
                      f"used {share['console']:.1%} of one core and the browser "
                      f"{share['browser']:.1%} (medians; CPU time from /proc)."]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000, help="throughput backlog rows")
    parser.add_argument("--repeat", type=int, default=15,
                        help="repetitions per condition (5 do not resolve 5%%)")
    parser.add_argument("--rate", type=float, default=500.0, help="latency case: commits/s")
    parser.add_argument("--seconds", type=float, default=10.0, help="latency case: seconds")
    parser.add_argument("--sample-seconds", type=float, default=5.0,
                        help="the console's --sample-seconds")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--drain-lanes", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true",
                        help="1 repetition, 5,000 rows, 5 s of latency; print only")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat, args.rows, args.seconds = 1, 5_000, 5.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = measure(args)
    section = markdown_section(result)
    print(section)
    if not args.quick:
        save_result("console", result, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
