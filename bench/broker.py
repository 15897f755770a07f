"""Broker benchmark: broker_lite against Redis Streams, the same load on both.

Usage::

    .venv/bin/python bench/broker.py [--messages N] [--repeat K] [--quick] [--cases a,b]
                                     [--profile] [--at-commit REV] [--render] [--acl]

It starts ``broker-lite serve`` and ``redis-server`` as child processes, each
with its data under ``bench/results/tmp/`` (Redis with its append-only file
on), and drives both from one asyncio load generator in this process: the
broker through ``broker_lite.client``, Redis through ``redis.asyncio``
(redis-py). Both get the same structure: a fixed number of requests kept in
flight (the *window*), each carrying one message or a batch of them, 1 KiB
bodies. The clock runs from the first request to the last answer; connecting,
warming up and checking the result are outside it.

Flush settings are matched: the broker's ``--flush async`` (acknowledged in
the page cache, fsync every 0.5 s) against ``appendfsync everysec``, and
``--flush sync`` (acknowledged after the group-commit fsync) against
``appendfsync always``.

Cases (``-async`` / ``-sync`` is the flush pairing):

* ``send-batch``: ``AsyncProducer.send_batch`` of 64 messages, 8 requests in
  flight on the one connection. Redis: a pipeline of 64 ``XADD`` (no
  MULTI), 8 pipelines in flight (redis-py takes one pooled connection each).
* ``send-single``: ``AsyncProducer.send``, one message per request, 64 in
  flight on the one connection. Redis: one ``XADD`` per request, 64 in flight.
* ``tx-batch``: transactions of one message: ``SEND_BATCH`` of 64 halves, then
  ``resolve_transactions`` (``END_TRANSACTION_BATCH``) committing the 64, as
  the outbox relay does; 8 such pairs in flight. Redis: a pipeline of 64
  ``XADD`` to a pending stream (the halves), then one ``MULTI``/``EXEC``
  pipeline with, per transaction, ``XADD`` of the message to the visible
  stream and ``XADD`` of a marker naming the half to an op stream.
* ``tx-single``: ``send_message_in_transaction`` (half, a local transaction
  that commits at once, end-transaction), 64 in flight. Redis: ``XADD`` of
  the half, then ``MULTI`` / the two ``XADD`` / ``EXEC``, 64 in flight.
* ``consume-K``: read back N preloaded messages from 4 queues (4 streams for
  Redis), one reader per queue, ``K`` messages per request:
  ``AsyncPullConsumer.pull`` against ``XREAD COUNT K`` from the last id read.

Every case is repeated (``--repeat``), ours and Redis back to back, the order
flipping each repetition; medians and the median of the paired ratios
(ours / Redis throughput) are reported.

Full runs write ``bench/results/broker.json`` and the generated part of
``bench/README.md``; ``--quick`` and ``--cases`` runs only print.
``--at-commit REV`` measures ``broker_lite`` (client and server) as
committed at REV. ``--acl`` compares broker_lite with itself instead, an ACL
on and off (``_broker_acl``: the send and transaction cases, paired rounds; a
full run saves ``results/broker-acl.json``).
``--profile`` also samples the broker process and this process with py-spy
during one extra run of ours per case and prints where the time goes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import redis
from _broker_acl import acl_result, print_acl_report, run_acl_compare
from _broker_cases import (
    BATCH,
    BATCH_WINDOW,
    BODY_SIZE,
    COUNT_SHARE,
    PULL_SIZES,
    QUEUES,
    REDIS_FSYNC,
    SINGLE_WINDOW,
    FlushMode,
    build_cases,
    console,
)
from _broker_profile import run_profiles
from _broker_report import (
    case_result,
    code_summary,
    markdown_section,
    measured_digest,
    package_dir,
    results_table,
    target_results,
    targets_table,
)
from _broker_run import run_mode
from _broker_servers import redis_py_parser, redis_version, servers
from _common import (
    RESULTS_DIR,
    TMP_DIR,
    benchmark_main,
    code_state,
    git_state,
    scratch_dir,
    utc_now,
    write_json,
)
from _report import announce, load_at_start, progress_bar, result_head, select_cases


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=100_000,
                        help="messages per send-batch-async run; other cases run a share of "
                             "it (see COUNT_SHARE); default 100000")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 12000 messages, 2 repetitions; no files written")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names to run (no files written)")
    parser.add_argument("--at-commit", metavar="REV", default="",
                        help="measure broker_lite as committed at REV, not the working tree")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the README section from bench/results/broker.json")
    parser.add_argument("--acl", action="store_true",
                        help="instead of Redis, compare broker_lite with an ACL and without "
                             "(two brokers, the same send and transaction cases, paired "
                             "rounds); prints the ACL on/off ratios; a full run saves "
                             "results/broker-acl.json")
    parser.add_argument("--profile", action="store_true",
                        help="also run ours once more per case under py-spy (broker process "
                             "and load generator) and print where the time goes")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.repeat = 12_000, 2
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    code = code_state(package_dir(), {"broker_lite_digest": measured_digest()})
    load_before = load_at_start(console)
    cases = select_cases(build_cases(args.messages), args.cases, name_known=True)
    profiles: dict[str, Any] = {}
    with scratch_dir("broker") as root:
        machine = announce("broker", root, console)
        console.print(f"code: {code_summary(code)}; redis-server {redis_version()}, redis-py "
                      f"{redis.__version__} ({redis_py_parser()}); data dir {root}",
                      highlight=False)
        progress = progress_bar(console)
        modes: list[FlushMode] = ["async", "sync"]
        with progress:
            task = progress.add_task("starting", total=args.repeat * len(cases) * 2)
            for flush in modes:
                mode_cases = [c for c in cases if c.spec.flush == flush]
                if not mode_cases:
                    continue
                progress.update(task, description=f"starting broker and redis ({flush})")
                with servers(root, flush) as pair:
                    run_mode(pair, mode_cases, args.repeat, progress, task)
                    if args.profile:
                        progress.stop()
                        profiles.update(run_profiles(pair, mode_cases,
                                                     TMP_DIR / "broker-profiles"))
                        progress.start()
    results = [case_result(c) for c in cases]
    console.print(results_table(results, f"median of {args.repeat} runs; ratio = median of "
                                         "paired ours/Redis throughput; CPU us per message"))
    targets = target_results(results)
    if targets:
        console.print(targets_table(targets))
    code["changed_during_run"] = measured_digest() != code["broker_lite_digest"]
    if code["changed_during_run"]:
        console.print("[yellow]warning:[/] broker_lite changed on disk during the run; the "
                      "broker processes started meanwhile may run other code")
    return {
        **result_head("broker", code, machine, load_before),
        "parameters": {
            "messages": args.messages, "repeat": args.repeat, "body_size": BODY_SIZE,
            "queues": QUEUES, "batch": BATCH, "batch_window": BATCH_WINDOW,
            "single_window": SINGLE_WINDOW, "pull_sizes": list(PULL_SIZES),
            "count_share": COUNT_SHARE, "redis_version": redis_version(),
            "redis_py_version": redis.__version__, "redis_py_parser": redis_py_parser(),
            "redis_appendfsync": REDIS_FSYNC,
            "data_dir": "bench/results/tmp (removed afterwards)",
        },
        "cases": results,
        "targets": targets,
        "profiles": profiles,
    }


def measure_acl(args: argparse.Namespace) -> int:
    """``--acl``: the send and transaction cases with the ACL on and off, same run."""
    load_before = load_at_start(console)
    cases = [c for c in select_cases(build_cases(args.messages), args.cases, name_known=True)
             if c.spec.kind in ("send", "tx")]
    with scratch_dir("broker-acl") as root:
        machine = announce("broker --acl", root, console)
        progress = progress_bar(console)
        with progress:
            task = progress.add_task("starting", total=args.repeat * len(cases) * 2)
            pairs = run_acl_compare(root, cases, args.repeat, progress, task)
    print_acl_report(console, pairs)
    load_after = load_at_start(console)
    console.print(f"load average at start {load_before}, at the end {load_after}",
                  highlight=False)
    if not args.quick and not args.cases:
        path = RESULTS_DIR / "broker-acl.json"
        write_json(path, {"benchmark": "broker --acl", "when": utc_now(), "git": git_state(),
                          "machine": machine, "load_average": {"start": load_before,
                                                               "end": load_after},
                          "repeat": args.repeat, "cases": acl_result(pairs)})
        console.print(f"saved {path}", highlight=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if "--acl" in args_list:
        return measure_acl(parse_args(args_list))
    return benchmark_main(__file__, "broker", list(sys.argv[1:] if argv is None else argv),
                          parse_args, measure, markdown_section)


if __name__ == "__main__":
    sys.exit(main())
