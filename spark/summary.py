"""The small aggregates the reports need, collected to the driver once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from spark.classify import CATEGORIES, DIVERGENT

__all__ = ["LATENCY_BUCKETS_MS", "Summary", "summarize"]

#: upper bounds of the latency histogram's buckets (the last one is open)
LATENCY_BUCKETS_MS = (10, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000)
_TIME_BUCKETS = 24


@dataclass(frozen=True, slots=True)
class Summary:
    """What the JSON, HTML and console reports show."""

    counts: dict[str, int]
    #: (bucket start ms, category, count), ``bucket_ms`` wide
    timeline: list[tuple[int, str, int]] = field(default_factory=list)
    bucket_ms: int = 0
    #: (upper bound ms or -1 for the open bucket, count)
    latency: list[tuple[int, int]] = field(default_factory=list)
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    #: (topic, divergent count), most first
    top_topics: list[tuple[str, int]] = field(default_factory=list)
    #: (segment, offset, reason) of each corrupt or truncated stretch
    problems: list[tuple[str, int, str]] = field(default_factory=list)
    segments: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def divergent(self) -> int:
        return sum(self.counts[c] for c in DIVERGENT)


def _latency_bucket() -> Column:
    lat = F.col("latency_ms")
    expr = F.when(lat <= LATENCY_BUCKETS_MS[0], LATENCY_BUCKETS_MS[0])
    for bound in LATENCY_BUCKETS_MS[1:]:
        expr = expr.when(lat <= bound, bound)
    return expr.otherwise(-1)


def summarize(classified: DataFrame, problems: DataFrame, segments: int) -> Summary:
    """Counts per category, the timeline, latency histogram and top topics."""
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
        latency = sorted(
            ((int(r["b"]), int(r["count"]))
             for r in visible.groupBy(_latency_bucket().alias("b")).count().collect()),
            key=lambda x: (x[0] < 0, x[0]))
        quant = visible.agg(F.percentile_approx("latency_ms", [0.5, 0.99]).alias("q")).first()
        p50 = p99 = None
        if quant is not None and quant["q"] is not None:
            p50, p99 = float(quant["q"][0]), float(quant["q"][1])
        top = [(r["topic"] or "?", int(r["count"])) for r in
               classified.where(F.col("category").isin(*DIVERGENT)).groupBy("topic").count()
               .orderBy(F.desc("count"), "topic").limit(10).collect()]
        found = [(r["segment"], int(r["offset"]), r["detail"])
                 for r in problems.orderBy("offset").collect()]
    finally:
        if owned:
            classified.unpersist()
    return Summary(counts=counts, timeline=timeline, bucket_ms=bucket_ms, latency=latency,
                   latency_p50_ms=p50, latency_p99_ms=p99, top_topics=top, problems=found,
                   segments=segments)
