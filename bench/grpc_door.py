"""gRPC door benchmark: the same load through the RocketMQ 5 gRPC door and the native door.

Usage::

    .venv/bin/python bench/grpc_door.py [--count N] [--repeat K] [--concurrency C]
                                   [--quick] [--cases send,tx,consume,official]
                                   [--at-commit REV] [--render]

One ``broker-lite serve`` (``--flush async``, data under ``bench/results/tmp``)
serves both doors. Every case runs the native client and a gRPC client side by
side, ``--repeat`` times, interleaved (the order flips each repetition), and
reports medians and the median of the paired ratios grpc / native (1.0 = the
gRPC door is as fast as the native one; higher is better).

Cases (bodies are 128 bytes, C requests in flight, default 64):

* ``send``: N messages. Native: ``AsyncProducer.send`` on one pipelined
  connection. gRPC: ``SendMessage`` calls on one ``grpc.aio`` channel, each
  request built the way the official client builds it (a fresh message id
  per message). A third side, the *floor*, sends the same gRPC load to a
  do-nothing ``grpc.aio`` servicer (its own process): what gRPC in Python
  costs before the door does anything.
* ``tx``: N transactions, half then COMMIT. Native:
  ``AsyncTransactionProducer.send_message_in_transaction``. gRPC:
  ``SendMessage`` (TRANSACTION) then ``EndTransaction`` (COMMIT).
* ``consume``: N messages stored first on a fresh topic, then the clock runs
  while a fresh group consumes and acks every one. Native:
  ``AsyncPushConsumer`` (pull batches of 32, C consume slots). gRPC: 4
  ``ReceiveMessage`` loops (batches of 32), each message acked by its own
  ``AckMessage`` call, C in flight, as the official push consumer does.
* ``official``: the official ``rocketmq-python-client`` Producer
  (``send_async`` with a window of W in flight, W in 1, 8, 32, 128), best W
  reported, next to the native send figure of the same run.

Full runs write ``bench/results/grpc.json`` and the generated part of
``bench/README.md``; ``--quick`` and ``--cases`` runs only print. With
``--at-commit REV`` the broker and the clients use ``broker_lite`` as
committed at REV (extracted with ``git archive``), not the working tree.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from _common import (
    BENCH_DIR,
    REPO_ROOT,
    RESULTS_DIR,
    SRC_ENV,
    TMP_DIR,
    Samples,
    add_repository_paths,
    code_state,
    describe_machine,
    load_average,
    machine_summary,
    render_saved,
    run_at_commit,
    save_result,
    scratch_dir,
    settle,
    utc_now,
)

# Put the code measured first on the import path (the working tree, or the
# commit extracted by --at-commit).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCH_DIR]
sys.path.insert(0, os.environ.get(SRC_ENV) or str(REPO_ROOT))
add_repository_paths()  # after it: procgroup, from this checkout
sys.path.append(str(BENCH_DIR))  # last: the private modules beside this script

from _grpc_clients import CASES, GRPC, NATIVE, official_send, prefill  # noqa: E402
from _grpc_readme import render  # noqa: E402
from _grpc_servers import broker, floor_server  # noqa: E402

RESULT_FILE = RESULTS_DIR / "grpc.json"
README = BENCH_DIR / "README.md"
OFFICIAL_WINDOWS = (1, 8, 32, 128)


def run_case(case: str, native: str, endpoint: str, count: int, concurrency: int,
             repeat: int, floor: str | None = None) -> dict[str, Any]:
    """Native and gRPC runs interleaved; with ``floor``, the floor servicer's too."""
    sides = ["native", "grpc", *(["floor"] if floor else [])]
    rates: dict[str, list[float]] = {side: [] for side in sides}
    targets = {"native": native, "grpc": endpoint, "floor": floor or ""}
    for rep in range(repeat):
        for side in sides if rep % 2 == 0 else sides[::-1]:
            topic = f"Bench{case.title()}{side.title()}{rep}{uuid.uuid4().hex[:6]}"
            if case == "consume":
                asyncio.run(prefill(native, topic, count))
            settle()
            fn = NATIVE[case] if side == "native" else GRPC[case]
            seconds = asyncio.run(fn(targets[side], topic, count, concurrency))
            rates[side].append(count / seconds)
            print(f"  {case:8} rep {rep + 1}/{repeat} {side:6} {count / seconds:10,.0f} /s",
                  flush=True)
    ratios = [g / n for g, n in zip(rates["grpc"], rates["native"], strict=True)]
    result = {"case": case, "count": count, "concurrency": concurrency, **rates,
              "ratios": ratios, "native_median": Samples(rates["native"]).median,
              "grpc_median": Samples(rates["grpc"]).median,
              "ratio_median": Samples(ratios).median,
              "ratio_range": [min(ratios), max(ratios)]}
    if floor:
        to_floor = [g / f for g, f in zip(rates["grpc"], rates["floor"], strict=True)]
        result.update(floor_median=Samples(rates["floor"]).median, floor_ratios=to_floor,
                      floor_ratio_median=Samples(to_floor).median)
    return result


def run_official(endpoint: str, count: int) -> dict[str, Any]:
    rates: dict[int, float] = {}
    for window in OFFICIAL_WINDOWS:
        settle()
        seconds = official_send(endpoint, f"BenchOfficial{window}", count, window)
        rates[window] = count / seconds
        print(f"  official send, window {window:3}: {rates[window]:10,.0f} msgs/s", flush=True)
    best = max(rates, key=lambda w: rates[w])
    return {"count": count, "rates": {str(w): r for w, r in rates.items()},
            "best_window": best, "best_rate": rates[best]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000, help="messages per run")
    parser.add_argument("--official-count", type=int, default=4_000,
                        help="messages per official-client run")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--cases", default="", help="comma-separated subset (prints only)")
    parser.add_argument("--quick", action="store_true", help="small counts, prints only")
    parser.add_argument("--render", action="store_true",
                        help="rewrite the README section from grpc.json, measure nothing")
    parser.add_argument("--at-commit", metavar="REV", default="",
                        help="measure broker_lite as committed at REV (extracted with git "
                             "archive), not the working tree")
    args = parser.parse_args()
    if args.at_commit and SRC_ENV not in os.environ:
        return run_at_commit(__file__, args.at_commit, sys.argv[1:])
    if args.render:
        render_saved("grpc", render)
        return 0
    if args.quick:
        args.count, args.official_count, args.repeat = 2_000, 1_000, 1
    wanted = [c for c in (args.cases.split(",") if args.cases else [*CASES, "official"]) if c]
    data: dict[str, Any] = {
        "benchmark": "grpc", "started": utc_now(), "count": args.count,
        "official_count": args.official_count, "repeat": args.repeat,
        "concurrency": args.concurrency, "machine": describe_machine(TMP_DIR),
        "git": code_state(_broker_lite_dir()), "load_start": load_average(), "cases": [],
    }
    print(f"gRPC door vs native door: {machine_summary(data['machine'])}")
    with scratch_dir("grpc") as root, broker(root / "broker") as (native, endpoint):
        print(f"broker: native={native} grpc={endpoint}")
        for case in CASES:
            if case not in wanted:
                continue
            if case == "send":
                with floor_server(root / "floor.log") as floor:
                    data["cases"].append(run_case(case, native, endpoint, args.count,
                                                  args.concurrency, args.repeat, floor))
            else:
                data["cases"].append(run_case(case, native, endpoint, args.count,
                                              args.concurrency, args.repeat))
        if "official" in wanted:
            data["official"] = run_official(endpoint, args.official_count)
    data["load_end"] = load_average()
    data["finished"] = utc_now()
    text = render(data)
    print()
    print(text)
    if not args.quick and not args.cases:
        save_result("grpc", data, text)
        print(f"\nwrote {RESULT_FILE.relative_to(REPO_ROOT)} and the grpc section of "
              f"{README.relative_to(REPO_ROOT)}")
    return 0


def _broker_lite_dir() -> Path:
    import broker_lite

    return Path(broker_lite.__file__).resolve().parent


if __name__ == "__main__":
    sys.exit(main())
