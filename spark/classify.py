"""Classification: one category per ``tx_id``, from the status table and the commit log
(or a broker export: :mod:`spark.export_source` gives the same facts).

Everything here takes DataFrames and returns DataFrames. The categories, in
the order they are decided (the first that applies wins):

``duplicate``        more than one visible commit record carries the tx_id
``phantom``          a visible commit while the DB row is ROLLBACK or missing
``discarded``        the half went to TRANS_CHECK_MAX_TIME_TOPIC, no commit
``stuck_half``       a half with no commit, rollback or discard past ``stuck``
``parked``           DB says COMMIT, no commit record, the relay parked the row
``undelivered``      DB says COMMIT, no commit record after ``grace``, not relayed yet
``lost``             DB says COMMIT, no commit record after ``grace``, and the relay
                     recorded it as relayed (or the status rows carry no bookkeeping)
``pending``          in flight: younger than ``grace`` (or than ``stuck`` for a half)
``payload_mismatch`` sha256 of the DB body differs from the committed body's
``late``             commit record's store time minus DB ``created_at`` over ``slo``
``ok``               everything else
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark.categories import CATEGORIES, DIVERGENT
from spark.segments import KIND_COMMIT, KIND_DISCARD, KIND_HALF, KIND_OP
from spark.status_source import BOOKKEEPING

__all__ = ["CATEGORIES", "DIVERGENT", "AuditWindow", "broker_facts", "classify", "divergent"]


@dataclass(frozen=True, slots=True)
class AuditWindow:
    """The audit's clock and limits, all in epoch milliseconds / milliseconds."""

    now_ms: int
    grace_ms: int = 60_000
    slo_ms: int = 5_000
    stuck_ms: int = 600_000
    since_ms: int | None = None
    until_ms: int | None = None


def _op_removals(records: DataFrame) -> DataFrame:
    """``tx_id, tx_state`` per half copy an op record removes, by its body's queue offsets.

    RocketMQ's op records name half-queue offsets only; broker_lite's also
    carry ``__transactionId__``, used when the half itself is gone.
    """
    kind = F.col("kind")
    copies = records.where((kind == KIND_HALF) & (F.col("tx_id") != "")).select(
        F.col("tx_id").alias("_half_tx"), F.col("queue_id").alias("_qid"),
        F.col("queue_offset").alias("_qoff"))
    ops = records.where(kind == KIND_OP).select(
        F.col("queue_id").alias("_qid"), F.col("tx_id").alias("_op_tx"), "tx_state",
        F.explode(F.split(F.col("op_offsets"), ",")).alias("_q"))
    ops = ops.where(F.col("_q") != "").withColumn("_qoff", F.col("_q").cast("long"))
    joined = ops.join(copies, ["_qid", "_qoff"], "left")
    return joined.select(
        F.coalesce(F.col("_half_tx"), F.col("_op_tx")).alias("tx_id"), "tx_state",
        F.lit(KIND_OP).alias("kind"),
    ).where(F.col("tx_id") != "")


def broker_facts(records: DataFrame) -> DataFrame:
    """One row per tx_id (the outbox row's key, see :mod:`spark.segments`) of what the
    commit log says about it, in RocketMQ's model. A row may have several halves
    (sent again after a relay died, a foreign producer's, each with its own
    transaction id through a proxy): all of them count toward the row.

    Halves by topic (the first copy is the half; later copies are renewed on
    checks and carry ``check_times``), commits by sysflag, op records by the
    half-queue offsets in their bodies, discards by their topic. An op record
    without ``TX_STATE`` (RocketMQ's) is a commit when a commit record exists,
    else a rollback.
    """
    direct = records.where((F.col("kind") != KIND_OP) & (F.col("tx_id") != ""))
    events = direct.unionByName(_op_removals(records), allowMissingColumns=True)
    kind = F.col("kind")
    is_half, is_commit = kind == KIND_HALF, kind == KIND_COMMIT
    is_op, is_discard = kind == KIND_OP, kind == KIND_DISCARD

    def op(state: str) -> Column:
        return F.max(F.when(is_op & (F.col("tx_state") == state), True).otherwise(False))

    first_commit = F.min(F.when(is_commit, F.struct(
        "offset", "store_ts", "topic", "body_sha256", "body_crc")))
    first_half = F.min(F.when(is_half, F.struct("offset", "store_ts", "real_topic")))
    facts = events.groupBy("tx_id").agg(
        first_half.alias("_half"),
        first_commit.alias("_commit"),
        F.count(F.when(is_commit, 1)).alias("n_commits"),
        F.array_sort(F.collect_list(F.when(is_commit, F.col("offset")))).alias("commit_offsets"),
        op("COMMIT").alias("_op_commit"),
        op("ROLLBACK").alias("_op_rollback"),
        op("").alias("_op_plain"),
        (op("DISCARD") | F.max(is_discard)).alias("discarded"),
        F.min(F.when(is_discard, F.col("offset"))).alias("discard_offset"),
        F.min(F.when(is_discard, F.col("store_ts"))).alias("discard_ts"),
        F.coalesce(F.max(F.when(is_half | is_discard, F.col("check_times"))), F.lit(0))
        .alias("checks"),
    )
    committed = F.col("n_commits") > 0
    return facts.select(
        "tx_id",
        F.col("_half.offset").alias("half_offset"),
        F.col("_half.store_ts").alias("half_ts"),
        F.col("_half.real_topic").alias("half_topic"),
        "n_commits", "commit_offsets",
        F.col("_commit.store_ts").alias("commit_ts"),
        F.col("_commit.topic").alias("commit_topic"),
        F.col("_commit.body_sha256").alias("broker_body_sha256"),
        (F.col("_op_commit") | (F.col("_op_plain") & committed)).alias("op_commit"),
        (F.col("_op_rollback") | (F.col("_op_plain") & ~committed)).alias("rolled_back"),
        "discarded", "discard_offset", "discard_ts", "checks",
    )


def _category(w: AuditWindow) -> Column:
    state = F.col("db_state")
    has_commit = F.coalesce(F.col("n_commits"), F.lit(0)) > 0
    has_half = F.col("half_offset").isNotNull()
    discarded = F.coalesce(F.col("discarded"), F.lit(False))
    resolved = has_commit | F.coalesce(F.col("rolled_back"), F.lit(False)) | discarded \
        | F.coalesce(F.col("op_commit"), F.lit(False))
    db_young = F.col("created_ms") > F.lit(w.now_ms - w.grace_ms)
    commit_young = F.col("commit_ts") > F.lit(w.now_ms - w.grace_ms)
    half_old = F.col("half_ts") <= F.lit(w.now_ms - w.stuck_ms)
    missing = state.isNull()
    owed = (state == "COMMIT") & ~has_commit
    parked = F.col("parked")  # null: no bookkeeping known
    return (
        F.when(F.col("n_commits") > 1, "duplicate")
        .when(has_commit & missing & commit_young, "pending")
        .when(has_commit & (missing | (state == "ROLLBACK")), "phantom")
        .when(discarded & ~has_commit, "discarded")
        .when(has_half & ~resolved & half_old, "stuck_half")
        .when(owed & parked, "parked")
        .when(owed & ~db_young & ~parked & F.col("relayed_ms").isNull(), "undelivered")
        .when(owed & ~db_young, "lost")
        .when(~has_commit & ((state == "COMMIT") | (has_half & ~resolved)), "pending")
        .when(~has_commit & (state == "UNKNOWN") & db_young, "pending")
        .when(has_commit & (F.col("db_body_sha256") != F.col("broker_body_sha256")),
              "payload_mismatch")
        .when(has_commit & (F.col("latency_ms") > F.lit(w.slo_ms)), "late")
        .otherwise("ok")
    )


def _utc(column: str) -> Column:
    """Epoch ms as ``YYYY-MM-DD HH:MM:SS UTC`` (the session's time zone is UTC)."""
    return F.concat(F.date_format(F.timestamp_millis(F.col(column)), "yyyy-MM-dd HH:mm:ss"),
                    F.lit(" UTC"))


def _detail(export: bool = False) -> Column:
    """Each category's evidence in words; ``export``: the facts came from a broker export
    (:mod:`spark.export_source`), whose messages have positions, not commit records."""
    cat = F.col("category")
    offsets = F.array_join(F.col("commit_offsets").cast("array<string>"), ",")
    commits, commit = (("messages at positions ", "message at position ") if export
                       else ("commit records at offsets ", "commit at offset "))
    no_commit = F.lit(", not in the broker export") if export else F.concat(
        F.lit(", no commit record; half "),
        F.when(F.col("half_offset").isNull(), F.lit("missing"))
        .when(F.col("rolled_back"), F.lit("rolled back"))
        .otherwise(F.lit("unresolved")))
    return (
        F.when(cat == "duplicate", F.concat(F.lit(commits), offsets))
        .when(cat == "phantom", F.concat(
            F.lit(commit), F.col("commit_offsets")[0].cast("string"),
            F.lit(" but DB row "), F.coalesce(F.col("db_state"), F.lit("missing"))))
        .when(cat == "discarded", F.concat(
            F.lit("half moved to TRANS_CHECK_MAX_TIME_TOPIC at offset "),
            F.coalesce(F.col("discard_offset").cast("string"), F.lit("?")),
            F.lit(" after "), F.col("checks").cast("string"), F.lit(" check(s)")))
        .when(cat == "stuck_half", F.concat(
            F.lit("half at offset "), F.col("half_offset").cast("string"),
            F.lit(" unresolved for "), ((F.col("audit_ms") - F.col("half_ts")) / 1000)
            .cast("long").cast("string"), F.lit(" s")))
        .when(cat == "lost", F.concat(
            F.lit("DB COMMIT"),
            F.when(F.col("relayed_ms").isNotNull(), F.concat(
                F.lit(", relayed at "), _utc("relayed_ms"))).otherwise(F.lit("")),
            no_commit))
        .when(cat == "parked", F.concat(
            F.lit("parked after "), F.col("attempts").cast("string"),
            F.lit(" attempt(s): "), F.coalesce(F.col("last_error"), F.lit("no error recorded"))))
        .when(cat == "undelivered", F.concat(
            F.lit("not relayed "), ((F.col("audit_ms") - F.col("created_ms")) / 1000)
            .cast("long").cast("string"), F.lit(" s after the DB commit; "),
            F.when(F.col("attempts") > 0, F.concat(
                F.col("attempts").cast("string"), F.lit(" failed attempt(s), next at "),
                _utc("next_attempt_ms"))).otherwise(F.lit("no attempt counted")),
            F.when(F.col("last_error").isNotNull(), F.concat(
                F.lit("; last error: "), F.col("last_error"))).otherwise(F.lit(""))))
        .when(cat == "payload_mismatch", F.lit(
            "sha256 of the DB body != the exported body's" if export
            else "sha256 of the DB body != the committed body's"))
        .when(cat == "late", F.concat(F.lit("commit visible "),
                                      F.col("latency_ms").cast("string"),
                                      F.lit(" ms after the DB commit")))
        .otherwise(F.lit(""))
    )


def classify(status: DataFrame, facts: DataFrame, window: AuditWindow,
             also: DataFrame | None = None, *, export: bool = False) -> DataFrame:
    """Every tx_id of either side, with its ``category``, evidence and ``detail``.

    ``status``: ``tx_id, state, db_topic, created_ms, db_body_sha256`` and the relay's
    bookkeeping (:func:`spark.status_source.read_status`; missing bookkeeping columns
    are taken as null, which makes an owed row ``lost``, not ``parked`` or
    ``undelivered``); ``facts``: :func:`broker_facts`.
    Rows outside ``since``/``until`` (by DB ``created_at``, else the first
    broker time) are left out, unless their tx_id is in ``also`` (a one-column
    ``tx_id`` DataFrame: the incremental mode's pending and newly touched ids).
    ``export``: ``facts`` are :func:`spark.export_source.export_facts` (a broker
    export's positions, not commit-log offsets); only the ``detail`` words differ.
    """
    for name, kind in BOOKKEEPING.items():  # e.g. a Parquet export of only the core columns
        if name not in status.columns:
            status = status.withColumn(name, F.lit(None).cast(kind))
    joined = status.withColumnRenamed("state", "db_state").join(facts, "tx_id", "full_outer")
    joined = joined.withColumns({
        "topic": F.coalesce("db_topic", "commit_topic", "half_topic"),
        "event_ms": F.coalesce("created_ms", "half_ts", "commit_ts", "discard_ts"),
        "latency_ms": F.col("commit_ts") - F.col("created_ms"),
        "n_commits": F.coalesce(F.col("n_commits"), F.lit(0)),
        "audit_ms": F.lit(window.now_ms),
    })
    keep = F.lit(True)
    if window.since_ms is not None:
        keep = keep & (F.col("event_ms") >= F.lit(window.since_ms))
    if window.until_ms is not None:
        keep = keep & (F.col("event_ms") < F.lit(window.until_ms))
    if also is not None:
        flagged = also.select("tx_id").distinct().withColumn("_also", F.lit(True))
        joined = joined.join(flagged, "tx_id", "left")
        keep = keep | F.coalesce(F.col("_also"), F.lit(False))
    joined = joined.where(keep)
    classified = joined.withColumn("category", _category(window))
    return classified.withColumn("detail", _detail(export)).select(
        "tx_id", "category", "detail", "topic", "db_state", "created_ms", "event_ms",
        "half_offset", "half_ts", "n_commits", "commit_offsets", "commit_ts", "latency_ms",
        "db_body_sha256", "broker_body_sha256", "rolled_back", "discarded", "discard_offset",
        "checks", *BOOKKEEPING,
    )


def divergent(classified: DataFrame) -> DataFrame:
    """The rows the audit reports: every category but ``ok`` and ``pending``."""
    return classified.where(F.col("category").isin(*DIVERGENT)) \
        .withColumnRenamed("category", "reason")
