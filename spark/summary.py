"""The small aggregates the reports need, collected to the driver once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark.categories import CATEGORIES, DIVERGENT
from spark.classify import AuditWindow

__all__ = ["LATENCY_PER_DECADE", "SAMPLE_IDS", "LatencyBucket", "Summary", "latency_buckets",
           "summarize"]

#: the latency histogram's buckets are equal on a log10 axis: this many per decade
#: (their bounds are the R5 preferred numbers 1, 1.6, 2.5, 4, 6.3, 10 ms, ...)
LATENCY_PER_DECADE = 5
#: how many divergent tx_ids the reports list (the Parquet output has them all)
SAMPLE_IDS = 50
_TIME_BUCKETS = 24


@dataclass(frozen=True, slots=True)
class LatencyBucket:
    """``[from_ms, to_ms)``; ``from_ms`` None for the first bucket when it holds < 1 ms."""

    from_ms: float | None
    to_ms: float
    count: int


@dataclass(frozen=True, slots=True)
class Summary:
    """What the JSON, HTML and console reports show."""

    counts: dict[str, int]
    #: (bucket start ms, category, count), ``bucket_ms`` wide
    timeline: list[tuple[int, str, int]] = field(default_factory=list)
    bucket_ms: int = 0
    #: every bucket from the lowest latency seen to the highest (or the SLO), empty ones too
    latency: list[LatencyBucket] = field(default_factory=list)
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_max_ms: float | None = None
    #: (topic, divergent count), most first
    top_topics: list[tuple[str, int]] = field(default_factory=list)
    #: (segment, offset, reason) of each corrupt or truncated stretch
    problems: list[tuple[str, int, str]] = field(default_factory=list)
    segments: int = 0
    #: (tx_id, category, topic, detail) of the first :data:`SAMPLE_IDS` divergent rows
    divergent_ids: list[tuple[str, str, str, str]] = field(default_factory=list)
    #: the clock and the rules the run used
    window: AuditWindow | None = None
    #: where ``--out`` wrote every divergent row (Parquet), if it did
    out: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def divergent(self) -> int:
        return sum(self.counts[c] for c in DIVERGENT)


def _latency_index() -> Column:
    """The histogram bucket of ``latency_ms``: -1 below 1 ms, else floor(5 log10)."""
    lat = F.col("latency_ms")
    return F.when(lat < 1, -1).otherwise(F.floor(F.log10(lat) * LATENCY_PER_DECADE)) \
        .cast("int")


def _bound(index: int) -> float:
    return float(10 ** (index / LATENCY_PER_DECADE))


def latency_buckets(found: dict[int, int], slo_ms: int | None) -> list[LatencyBucket]:
    """Dense buckets from the lowest index found to the highest (or the SLO's)."""
    if not found:
        return []
    top = max(found)
    if slo_ms is not None and slo_ms >= 1:
        top = max(top, math.floor(math.log10(slo_ms) * LATENCY_PER_DECADE))
    return [LatencyBucket(None if i < 0 else _bound(i), _bound(i + 1) if i >= 0 else 1.0,
                          found.get(i, 0))
            for i in range(min(found), top + 1)]


def _rank() -> Column:
    """Categories in report order (the invariant's divergences first)."""
    return F.array_position(F.array(*(F.lit(c) for c in CATEGORIES)), F.col("category"))


def summarize(classified: DataFrame, problems: DataFrame, segments: int,
              window: AuditWindow | None = None) -> Summary:
    """Counts per category, the timeline, latency histogram, top topics and sample ids."""
    owned = not classified.is_cached
    if owned:
        classified = classified.cache()
    try:
        counts = {c: 0 for c in CATEGORIES}
        for row in classified.groupBy("category").count().collect():
            counts[row["category"]] = int(row["count"])
        span = classified.agg(F.min("event_ms").alias("lo"), F.max("event_ms").alias("hi")).first()
        timeline: list[tuple[int, str, int]] = []
        bucket_ms = 0
        if span is not None and span["lo"] is not None:
            lo, hi = int(span["lo"]), int(span["hi"])
            bucket_ms = max(1_000, -(-(hi - lo + 1) // _TIME_BUCKETS))
            start = F.lit(lo) + ((F.col("event_ms") - lo) / bucket_ms).cast("long") * bucket_ms
            timeline = sorted(
                (int(r["start"]), r["category"], int(r["count"]))
                for r in classified.groupBy(start.alias("start"), "category").count().collect())
        visible = classified.where(F.col("latency_ms").isNotNull())
        found = {int(r["b"]): int(r["count"])
                 for r in visible.groupBy(_latency_index().alias("b")).count().collect()}
        quant = visible.agg(F.percentile_approx("latency_ms", [0.5, 0.99]).alias("q"),
                            F.max("latency_ms").alias("top")).first()
        p50 = p99 = top_ms = None
        if quant is not None and quant["q"] is not None:
            p50, p99 = float(quant["q"][0]), float(quant["q"][1])
            top_ms = float(quant["top"])
        bad = classified.where(F.col("category").isin(*DIVERGENT))
        top = [(r["topic"] or "?", int(r["count"])) for r in
               bad.groupBy("topic").count().orderBy(F.desc("count"), "topic").limit(10).collect()]
        sample = [(r["tx_id"], r["category"], r["topic"] or "?", r["detail"] or "") for r in
                  bad.orderBy(_rank(), "event_ms", "tx_id").limit(SAMPLE_IDS)
                  .select("tx_id", "category", "topic", "detail").collect()]
        issues = [(r["segment"], int(r["offset"]), r["detail"])
                  for r in problems.orderBy("offset").collect()]
    finally:
        if owned:
            classified.unpersist()
    return Summary(counts=counts, timeline=timeline, bucket_ms=bucket_ms,
                   latency=latency_buckets(found, window.slo_ms if window else None),
                   latency_p50_ms=p50, latency_p99_ms=p99, latency_max_ms=top_ms,
                   top_topics=top, problems=issues, segments=segments, divergent_ids=sample,
                   window=window)
