"""Benchmark: the audit's classification on Spark local[2] vs DuckDB in one process.

Both sides classify the same synthetic data: N transactions as the status
table (Parquet: ``tx_id, state, db_topic, created_ms, db_body_sha256``) and
3 commit-log records each (half, commit, op COMMIT) in the decoded-record
schema of ``spark.commitlog_source.RECORD_SCHEMA``, with every seventh
divergence seeded once per thousand transactions. Spark runs
``spark.classify.broker_facts`` + ``classify`` + a count per category; the
baseline is the same decision table in one DuckDB SQL query. The counts must
agree. Segment decoding is not measured here (it is per-segment Python, see
``bench/storage.py`` for the codec's speed).

Usage: ``.venv/bin/python bench/audit.py [--sizes 100000,1000000] [--repeat 2]``;
``--quick`` (10,000 once, prints only).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    REPO_ROOT,
    TMP_DIR,
    describe_machine,
    git_state,
    load_average,
    machine_summary,
    median,
    save_result,
    settle,
    utc_now,
)

sys.path.insert(0, str(REPO_ROOT))

import duckdb

NOW_MS = 1_800_000_000_000
GRACE_MS, SLO_MS, STUCK_MS = 60_000, 5_000, 600_000


def generate(n: int, directory: Path) -> None:
    """Status and record Parquet files for ``n`` transactions (DuckDB, in seconds)."""
    directory.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    con.execute(f"""
        CREATE TEMP TABLE tx AS
        SELECT i, printf('TX%012d', i) AS tx_id, i % 1000 AS d,
               {NOW_MS} - 3600000 + (i * 3000000 // {n}) AS t0
        FROM range({n}) r(i)""")
    con.execute(f"""
        COPY (SELECT tx_id,
                     CASE d WHEN 3 THEN 'ROLLBACK' WHEN 6 THEN 'UNKNOWN' WHEN 7 THEN 'UNKNOWN'
                            ELSE 'COMMIT' END AS state,
                     'Topic' || (i % 16) AS db_topic,
                     CASE d WHEN 5 THEN t0 - 10000 ELSE t0 END AS created_ms,
                     CASE d WHEN 4 THEN md5('x' || i) ELSE md5(i::VARCHAR) END
                       AS db_body_sha256
              FROM tx) TO '{directory / "status.parquet"}' (FORMAT parquet)""")
    # kinds: 0 half, 1 commit, 2 op; d=1 lost (rollback op, no commit),
    # d=2 duplicate (a second commit), d=6 stuck (half only), d=7 discarded
    con.execute(f"""
        COPY (
          WITH recs AS (
            SELECT tx.*, k FROM tx, range(4) r(k)
            WHERE k < 3 OR d = 2 OR d = 7)
          SELECT CASE WHEN k = 0 THEN 'half'
                      WHEN k = 1 AND d NOT IN (1, 6, 7) THEN 'commit'
                      WHEN k = 3 AND d = 2 THEN 'commit'
                      WHEN k = 3 AND d = 7 THEN 'discard'
                      ELSE 'op' END AS kind,
                 printf('%020d', (i * 1200) // 67108864 * 67108864) AS segment,
                 i * 1200 + k * 300 AS "offset", tx_id,
                 CASE WHEN k = 0 THEN 'RMQ_SYS_TRANS_HALF_TOPIC' ELSE 'Topic' || (i % 16) END
                   AS topic,
                 CASE WHEN k = 0 THEN 'Topic' || (i % 16) ELSE '' END AS real_topic,
                 'commit' AS sysflag, t0 + 5 + k AS store_ts, t0 AS born_ts,
                 0 AS prepared_offset,
                 CASE WHEN k = 2 AND d = 1 THEN 'ROLLBACK' WHEN k = 2 AND d = 6 THEN 'CHECK'
                      WHEN k = 2 AND d = 7 THEN 'DISCARD' WHEN k = 2 THEN 'COMMIT'
                      ELSE '' END AS tx_state,
                 md5(i::VARCHAR) AS body_sha256, 0 AS body_crc, '' AS detail
          FROM recs
        ) TO '{directory / "records.parquet"}' (FORMAT parquet)""")
    con.close()


BASELINE_SQL = """
WITH facts AS (
  SELECT tx_id,
         min("offset") FILTER (WHERE kind = 'half') AS half_offset,
         min(store_ts) FILTER (WHERE kind = 'half') AS half_ts,
         count(*) FILTER (WHERE kind = 'commit') AS n_commits,
         arg_min(store_ts, "offset") FILTER (WHERE kind = 'commit') AS commit_ts,
         arg_min(body_sha256, "offset") FILTER (WHERE kind = 'commit') AS broker_sha,
         coalesce(bool_or(kind = 'op' AND tx_state = 'COMMIT'), false) AS op_commit,
         coalesce(bool_or(kind = 'op' AND tx_state = 'ROLLBACK'), false) AS rolled_back,
         coalesce(bool_or((kind = 'op' AND tx_state = 'DISCARD') OR kind = 'discard'), false)
           AS discarded
  FROM read_parquet($records) WHERE tx_id <> '' GROUP BY tx_id),
j AS (
  SELECT s.state, s.created_ms, s.db_body_sha256, f.*, coalesce(f.n_commits, 0) AS nc,
         f.commit_ts - s.created_ms AS latency,
         (coalesce(f.n_commits, 0) > 0 OR coalesce(f.rolled_back, false)
          OR coalesce(f.discarded, false) OR coalesce(f.op_commit, false)) AS resolved
  FROM read_parquet($status) s FULL OUTER JOIN facts f ON s.tx_id = f.tx_id)
SELECT CASE
  WHEN nc > 1 THEN 'duplicate'
  WHEN nc > 0 AND state IS NULL AND commit_ts > $now - $grace THEN 'pending'
  WHEN nc > 0 AND (state IS NULL OR state = 'ROLLBACK') THEN 'phantom'
  WHEN coalesce(discarded, false) AND nc = 0 THEN 'discarded'
  WHEN half_offset IS NOT NULL AND NOT resolved AND half_ts <= $now - $stuck THEN 'stuck_half'
  WHEN state = 'COMMIT' AND nc = 0 AND NOT (created_ms > $now - $grace) THEN 'lost'
  WHEN nc = 0 AND (state = 'COMMIT' OR (half_offset IS NOT NULL AND NOT resolved)) THEN 'pending'
  WHEN nc = 0 AND state = 'UNKNOWN' AND created_ms > $now - $grace THEN 'pending'
  WHEN nc > 0 AND db_body_sha256 <> broker_sha THEN 'payload_mismatch'
  WHEN nc > 0 AND latency > $slo THEN 'late'
  ELSE 'ok' END AS category, count(*) AS n
FROM j GROUP BY ALL
"""


def run_duckdb(directory: Path) -> dict[str, int]:
    con = duckdb.connect()
    con.execute("SET threads = 1")  # the single-process baseline
    rows = con.execute(BASELINE_SQL, {
        "records": str(directory / "records.parquet"),
        "status": str(directory / "status.parquet"), "now": NOW_MS, "grace": GRACE_MS,
        "stuck": STUCK_MS, "slo": SLO_MS}).fetchall()
    con.close()
    return {str(c): int(n) for c, n in rows}


def run_spark(spark: Any, directory: Path) -> dict[str, int]:
    from spark.classify import AuditWindow, broker_facts, classify

    status = spark.read.parquet(str(directory / "status.parquet"))
    records = spark.read.parquet(str(directory / "records.parquet"))
    window = AuditWindow(now_ms=NOW_MS, grace_ms=GRACE_MS, slo_ms=SLO_MS, stuck_ms=STUCK_MS)
    out = classify(status, broker_facts(records), window).groupBy("category").count().collect()
    return {r["category"]: int(r["count"]) for r in out}


def session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from spark.session import build_session

    spark = build_session(master="local[2]", jars=[], shuffle_partitions=8)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure(spark: Any, n: int, repeat: int) -> dict[str, Any]:
    directory = TMP_DIR / f"audit-{n}"
    shutil.rmtree(directory, ignore_errors=True)
    t = time.perf_counter()
    generate(n, directory)
    gen_s = time.perf_counter() - t
    spark_s: list[float] = []
    duck_s: list[float] = []
    counts: dict[str, int] = {}
    for rep in range(repeat):
        order = [("spark", spark_s), ("duckdb", duck_s)]
        for name, samples in order if rep % 2 == 0 else order[::-1]:
            settle()
            t = time.perf_counter()
            got = run_spark(spark, directory) if name == "spark" else run_duckdb(directory)
            samples.append(time.perf_counter() - t)
            if counts and got != counts:
                raise SystemExit(f"{name} disagrees at N={n}: {got} != {counts}")
            counts = got
    shutil.rmtree(directory, ignore_errors=True)
    ratios = [(n / s) / (n / d) for s, d in zip(spark_s, duck_s, strict=True)]
    result = {"n": n, "generate_s": round(gen_s, 2), "spark_s": spark_s, "duckdb_s": duck_s,
              "spark_tx_per_s": round(n / median(spark_s)),
              "duckdb_tx_per_s": round(n / median(duck_s)),
              "ratio_spark_over_duckdb": round(median(ratios), 3), "counts": counts}
    print(f"N={n:>9,}: spark {result['spark_tx_per_s']:>10,} tx/s  duckdb(1 thread) "
          f"{result['duckdb_tx_per_s']:>10,} tx/s  ratio {result['ratio_spark_over_duckdb']}",
          flush=True)
    print(f"             counts {counts}", flush=True)
    return result


def render(data: dict[str, Any]) -> str:
    lines = [f"Machine: {machine_summary(data['machine'])}. Measured {data['when']}, "
             f"commit {data['git'].get('commit', '?')[:10]}.", "",
             "| transactions | Spark local[2] tx/s | DuckDB 1 thread tx/s | Spark / DuckDB "
             "| Spark s | DuckDB s |", "|---:|---:|---:|---:|---:|---:|"]
    for r in data["results"]:
        lines.append(f"| {r['n']:,} | {r['spark_tx_per_s']:,} | {r['duckdb_tx_per_s']:,} | "
                     f"{r['ratio_spark_over_duckdb']} | {median(r['spark_s']):.1f} | "
                     f"{median(r['duckdb_s']):.1f} |")
    lines += ["", *data.get("notes", [])]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--note", action="append", default=[])
    args = p.parse_args()
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    spark = session()
    run_spark(spark, _warm())  # JIT and Python workers, outside the timings
    results = [measure(spark, n, 1 if args.quick else args.repeat) for n in sizes]
    spark.stop()
    if args.quick:
        return 0
    data = {"benchmark": "audit", "when": utc_now(), "machine": describe_machine(TMP_DIR),
            "load_average": load_average(), "git": git_state(), "repeat": args.repeat,
            "results": results, "notes": args.note}
    save_result("audit", data, render(data))
    return 0


def _warm() -> Path:
    directory = TMP_DIR / "audit-warm"
    shutil.rmtree(directory, ignore_errors=True)
    generate(2_000, directory)
    return directory


if __name__ == "__main__":
    sys.exit(main())
