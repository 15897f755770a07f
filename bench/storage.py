"""Storage benchmark: MessageStore appends and crash recovery vs the physical bound.

Usage::

    .venv/bin/python bench/storage.py [--records N] [--repeat K] [--quick]
                                      [--recovery-mb MB] [--cases a,b] [--profile]
                                      [--at-commit REV] [--render]

Every case runs our code ("ours") and the plain-syscall bound on the same disk
("bound") side by side, ``--repeat`` times, interleaved (the order flips each
repetition). It reports medians and the median of the paired ratios
ours / bound (1.0 = we reach what the disk and kernel allow; higher is better).

Cases (records are 1 KiB bodies, one encoded record is ~1.2 KB):

* ``async-N``: N threads call ``MessageStore.put`` with ``flush="async"``.
  Bound: one thread ``os.write``-ing the same encoded record bytes, one call per
  record, to a plain file.
* ``sync-N``: the same with ``flush="sync"`` (``put`` returns after the group
  commit ``fdatasync``). Bound: one thread writing batches of N records
  (one ``os.write`` each) and calling ``fdatasync`` after each batch -- the best
  group commit can do with N appenders, each having one record in flight.
* ``sync-asyncio-N`` (N = 8, 64): N asyncio tasks on one event loop, each
  with one record in flight, acknowledged the way the server does it:
  ``put_nowait`` and a wait in the server's ``FlushGate``. Same bound as ``sync-N``.
* ``recovery-*``: reopen a log of ``--recovery-mb`` MB after a simulated crash
  (checkpoint removed, ``abort`` present), so every record is validated (CRC
  and length) from the start. Bound: sequential ``readinto`` of the same bytes
  plus ``zlib.crc32`` over them. ``warm`` runs from the page cache (a process
  crash), ``cold`` evicts the files first with ``posix_fadvise(DONTNEED)`` (a
  machine restart). ``recovery-scan-warm`` times ``CommitLog.recover`` alone.

Full runs write ``bench/results/storage.json`` and the generated part of
``bench/README.md``; ``--quick`` and ``--cases`` runs only print. With
``--at-commit REV`` the script measures ``broker_lite`` as committed at REV
(extracted with ``git archive``, run in a child process) instead of the
working tree.
"""


from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import COMMIT_ENV, SRC_ENV, benchmark_main, code_state, scratch_dir, source_digest
from _report import announce, load_at_start, progress_bar, result_head, select_cases
from _storage_append import SYNC_DIVISORS, append_comparisons
from _storage_cases import (
    BODY_SIZE,
    QUEUES,
    SEGMENT_SIZE,
    TOPIC,
    Comparison,
    Measurement,
    Side,
    console,
    encoded_record,
    make_message,
    storage_dir,
)
from _storage_profile import run_profiles
from _storage_recovery import build_recovery_log, recovery_comparisons
from _storage_report import (
    case_result,
    code_summary,
    markdown_section,
    results_table,
    target_results,
    targets_table,
)
from rich.progress import Progress
from storage_versus import VersusWorker, serve


def run_all(cases: Sequence[Comparison], repeat: int, progress: Progress) -> None:
    """``repeat`` rounds over every case, its sides back to back, the order rotated."""
    task = progress.add_task("measuring", total=repeat * sum(len(c.sides()) for c in cases))
    for rep in range(repeat):
        for case in cases:
            sides = case.sides()
            sides = sides[rep % len(sides):] + sides[: rep % len(sides)]  # rotate the order
            for side in sides:
                label = "ours" if side is case.ours else "bound" if side is case.bound \
                    else "versus"
                progress.update(task, description=f"[{rep + 1}/{repeat}] {case.name} {label}")
                side.samples.append(side.run())
                progress.advance(task)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=200_000,
                        help="records per async run (sync runs: N/20, N/5, N/3 for 1/8/64 "
                             "appenders); default 200000")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--recovery-mb", type=float, default=256.0,
                        help="size of the log recovered (default 256 MB)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 20000 records, 3 repetitions, 32 MB log; no files written")
    parser.add_argument("--cases", default="",
                        help="comma-separated case names to run (no files written)")
    parser.add_argument("--at-commit", metavar="REV", default="",
                        help="measure broker_lite as committed at REV (e.g. HEAD), not the "
                             "working tree")
    parser.add_argument("--versus", metavar="REV", default="",
                        help="also run every case with broker_lite as committed at REV (in a "
                             "child process, interleaved with ours and the bound) and report "
                             "ours/REV")
    parser.add_argument("--versus-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the README section from bench/results/storage.json")
    parser.add_argument("--profile", action="store_true",
                        help="also profile async-1 and recovery with cProfile")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.repeat, args.recovery_mb = 20_000, 3, 32.0
    return args



def _code_state() -> dict[str, Any]:
    """Which broker_lite is measured, with a digest of its storage package."""
    return code_state(storage_dir(), {"storage_digest": source_digest(storage_dir())})


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every selected case; return the result document."""
    code = _code_state()
    load_before = load_at_start(console)
    with scratch_dir("storage") as root:
        machine = announce("storage", root, console)
        console.print(f"code: {code_summary(code)}; data dir {root}", highlight=False)
        record = encoded_record(root)
        progress = progress_bar(console)
        with progress:
            setup = progress.add_task("building messages and the recovery log", total=None)
            messages = [make_message(i) for i in range(args.records)]
            log = build_recovery_log(root, args.recovery_mb)
            progress.remove_task(setup)
            cases = select_cases(append_comparisons(root, args.records, messages, record)
                                 + recovery_comparisons(log), args.cases)
            worker = start_versus(args, cases) if args.versus else None
            try:
                run_all(cases, args.repeat, progress)
            finally:
                if worker is not None:
                    worker.close()
        console.print(results_table(cases, f"median of {args.repeat} runs; ratio = median of "
                                           "paired ours/bound throughput"))
        targets = target_results(cases)
        if targets:
            console.print(targets_table(targets))
        if args.profile:
            run_profiles(root, log, messages[: min(len(messages), 100_000)])
    code["changed_during_run"] = source_digest(storage_dir()) != code["storage_digest"]
    if code["changed_during_run"]:
        console.print("[yellow]warning:[/] broker_lite/storage changed on disk during the run; "
                      "the code imported at the start was measured")
    return {
        **result_head("storage", code, machine, load_before),
        "parameters": {
            "records_async": args.records, "repeat": args.repeat,
            "recovery_mb": args.recovery_mb, "recovery_records": log.records,
            "body_size": BODY_SIZE, "record_size": len(record), "segment_size": SEGMENT_SIZE,
            "topic": TOPIC, "queues": QUEUES, "sync_divisors": SYNC_DIVISORS,
            "data_dir": "bench/results/tmp (removed afterwards)",
        },
        "versus": None if worker is None else {"commit": worker.commit, **worker.info},
        "cases": [case_result(c) for c in cases],
        "targets": targets,
    }


def start_versus(args: argparse.Namespace, cases: Sequence[Comparison]) -> VersusWorker:
    """Start the ``--versus`` child and give every case a side run by it."""
    worker = VersusWorker(args.versus, Path(__file__), [
        "--records", str(args.records), "--recovery-mb", str(args.recovery_mb),
        "--cases", ",".join(c.name for c in cases)], SRC_ENV, COMMIT_ENV)
    console.print(f"versus: broker_lite at commit {worker.commit[:12]} in a child process; "
                  f"its record is {worker.info['record_size']} B", highlight=False)

    def run_in_child(name: str) -> Measurement:
        return Measurement(*worker.run(name))

    for case in cases:
        case.versus = Side(f"broker_lite at {worker.commit[:12]}: {case.ours.what}",
                           functools.partial(run_in_child, case.name))
    return worker


def versus_worker(args: argparse.Namespace) -> int:
    """The ``--versus`` child: build its own workload with the code it imported, then serve."""
    code = _code_state()
    with scratch_dir("storage-versus") as root:
        record = encoded_record(root)
        messages = [make_message(i) for i in range(args.records)]
        log = build_recovery_log(root, args.recovery_mb)
        cases = select_cases(append_comparisons(root, args.records, messages, record)
                             + recovery_comparisons(log), args.cases)
        serve({"code": code, "record_size": len(record), "recovery_records": log.records,
               "recovery_bytes": log.log_bytes}, {c.name: c.ours.run for c in cases}, sys.stdout)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.versus_worker:
        return versus_worker(args)
    return benchmark_main(__file__, "storage", argv, parse_args, measure, markdown_section)


if __name__ == "__main__":
    sys.exit(main())
