"""One audit run, wired from parsed arguments: read, classify, report, remember.

The broker side is a commit log (``--commitlog``: decoded, remembered with
``--state``) or a broker export (``--broker-export``: :mod:`spark.export_source`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.categories import RECHECK
from spark.classify import AuditWindow, broker_facts, classify, divergent
from spark.commitlog_source import SegmentFile, decode_files, list_segments, split_problems
from spark.errors import AuditInputError
from spark.export_source import export_facts, export_files, read_messages
from spark.html_report import write_html
from spark.report import print_summary, write_json
from spark.session import build_session
from spark.state import AuditState, load_state, save_state
from spark.status_source import JdbcSource, read_status
from spark.summary import Summary, summarize

__all__ = ["run_audit"]


def _window(args: argparse.Namespace, state: AuditState | None) -> AuditWindow:
    now = args.as_of if args.as_of is not None else int(time.time() * 1000)
    since = args.since
    if since is None and state is not None and state.until_ms is not None:
        since = state.until_ms
    if since is not None and args.until is not None and since >= args.until:
        raise AuditInputError("--since must be before --until", argument="--since")
    return AuditWindow(now_ms=now, grace_ms=int(args.grace * 1000), slo_ms=int(args.slo * 1000),
                       stuck_ms=int(args.stuck_after * 1000), since_ms=since,
                       until_ms=args.until)


def _report(args: argparse.Namespace, summary: Summary) -> None:
    """The outputs the arguments ask for: JSON, HTML, the console table."""
    if args.json is not None:
        write_json(summary, args.json)
    if args.html is not None:
        write_html(summary, args.html)
    if not args.quiet:
        print_summary(summary)


def _audit_export(args: argparse.Namespace, spark: SparkSession, status: DataFrame,
                  window: AuditWindow) -> int:
    """The run over a broker export (``--broker-export``) instead of a commit log."""
    files = export_files(args.broker_export)
    messages = read_messages(spark, files).cache()
    classified = classify(status, export_facts(messages), window, export=True).cache()
    if args.out is not None:
        divergent(classified).write.mode("overwrite").parquet(str(args.out))
    no_problems = spark.createDataFrame([], "segment string, offset long, detail string")
    summary = summarize(classified, no_problems, 0, window)
    summary = dataclasses.replace(summary, out=None if args.out is None else str(args.out))
    summary.extra["broker_export"] = {"files": len(files), "messages": messages.count()}
    _report(args, summary)
    classified.unpersist()
    messages.unpersist()
    return 1 if summary.divergent else 0


def run_audit(args: argparse.Namespace) -> int:
    """Returns the exit code: 0 clean, 1 divergent or corrupt."""
    state = load_state(args.state) if args.state is not None else None
    window = _window(args, state)
    jars = [j for j in args.jars.split(",") if j] if args.jars else None
    spark = build_session(master=args.master, jars=jars, progress=args.progress,
                          shuffle_partitions=args.shuffle_partitions, ui=args.spark_ui,
                          quiet_jvm=args.quiet)
    source = JdbcSource(url=args.jdbc_url, table=args.table, user=args.user,
                        password=args.password, num_partitions=max(1, args.partitions))
    status = read_status(spark, source)
    if getattr(args, "broker_export", None) is not None:
        return _audit_export(args, spark, status, window)
    files = list_segments(spark, args.commitlog)

    to_decode: list[SegmentFile] = files
    kept: DataFrame | None = None
    also: DataFrame | None = None
    if state is not None:
        unchanged = {f.name for f in state.unchanged(files)}
        to_decode = [f for f in files if f.name not in unchanged]
        previous = state.records(spark)
        if previous is not None:
            kept = previous.where(F.col("segment").isin(*unchanged)) if unchanged \
                else previous.limit(0)
    fresh, problems = split_problems(decode_files(spark, to_decode))
    fresh = fresh.cache()
    records = fresh if kept is None else kept.unionByName(fresh)
    if state is not None and state.until_ms is not None:
        touched = fresh.where((F.col("tx_id") != "") & (F.col("offset") > state.max_offset)) \
            .select("tx_id")
        pending = state.pending(spark)
        also = touched if pending is None else touched.unionByName(pending.select("tx_id"))

    classified = classify(status, broker_facts(records), window, also).cache()
    if args.out is not None:
        divergent(classified).write.mode("overwrite").parquet(str(args.out))
    summary = summarize(classified, problems, len(files), window)
    summary = dataclasses.replace(summary, out=None if args.out is None else str(args.out))
    summary.extra["decoded_segments"] = len(to_decode)
    _report(args, summary)
    if state is not None:
        pending_ids = classified.where(F.col("category").isin(*RECHECK)).select("tx_id")
        until = args.until if args.until is not None else window.now_ms
        save_state(state, records, pending_ids, files, until)
    classified.unpersist()
    fresh.unpersist()
    return 1 if summary.divergent or summary.problems else 0
