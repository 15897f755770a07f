"""Incremental mode (``--state DIR``): what earlier runs decoded and left pending.

Layout of the state directory (a local path)::

    state.json           {"generation": G, "segments": {name: size}, "until_ms": T,
                          "max_offset": O}
    records-G/           Parquet: the audited records of every segment read so far
    pending-G/           Parquet: tx_id of every transaction the last run left pending,
                         parked or undelivered (``spark.categories.RECHECK``)

A run decodes only segments that are new, whose size changed, or that were
the last (active) segment at the previous run: broker_lite appends only to its
last segment, and segment files are preallocated, so their size says nothing
about how much is written. It keeps the stored records of the other segments,
and audits the window since the last run's end, plus the ids left pending (or
parked, or undelivered: the outbox still owes them) and
every id a record past the previous run's last offset touches (a late
duplicate or phantom commit of an old transaction).

A new generation is written next to the old one, then ``state.json`` is
replaced atomically, then the old generation is removed, so a run that dies
half-way leaves the previous state usable.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.commitlog_source import RECORD_SCHEMA, SegmentFile
from spark.errors import AuditInputError

__all__ = ["AuditState", "load_state", "save_state"]


@dataclass(frozen=True, slots=True)
class AuditState:
    """What the last run left; an empty state for the first run."""

    directory: Path
    generation: int = 0
    segments: dict[str, int] = field(default_factory=dict)
    until_ms: int | None = None
    #: physical offset of the last record the previous run read (-1: none)
    max_offset: int = -1

    def unchanged(self, files: list[SegmentFile]) -> list[SegmentFile]:
        """Segments whose stored records still hold (not the previous tail)."""
        tail = max(self.segments, default=None)
        return [f for f in files if self.segments.get(f.name) == f.size and f.name != tail]

    def records(self, spark: SparkSession) -> DataFrame | None:
        path = self.directory / f"records-{self.generation}"
        return spark.read.schema(RECORD_SCHEMA).parquet(str(path)) if path.exists() else None

    def pending(self, spark: SparkSession) -> DataFrame | None:
        path = self.directory / f"pending-{self.generation}"
        return spark.read.parquet(str(path)) if path.exists() else None


def load_state(directory: Path) -> AuditState:
    meta = directory / "state.json"
    if not meta.exists():
        return AuditState(directory)
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
        return AuditState(directory, int(data["generation"]),
                          {str(k): int(v) for k, v in data["segments"].items()},
                          None if data.get("until_ms") is None else int(data["until_ms"]),
                          int(data.get("max_offset", -1)))
    except (ValueError, KeyError, TypeError) as exc:
        raise AuditInputError(f"--state: {meta} is not an audit state file ({exc})") from exc


def save_state(old: AuditState, records: DataFrame, pending: DataFrame,
               files: list[SegmentFile], until_ms: int) -> AuditState:
    """Write the next generation and switch ``state.json`` to it."""
    old.directory.mkdir(parents=True, exist_ok=True)
    path = old.directory / f"records-{old.generation + 1}"
    records.write.mode("overwrite").parquet(str(path))
    top = records.sparkSession.read.schema(RECORD_SCHEMA).parquet(str(path)) \
        .agg(F.max("offset")).first()
    max_offset = -1 if top is None or top[0] is None else int(top[0])
    new = AuditState(old.directory, old.generation + 1, {f.name: f.size for f in files},
                     until_ms, max(max_offset, old.max_offset))
    pending.select("tx_id").write.mode("overwrite") \
        .parquet(str(new.directory / f"pending-{new.generation}"))
    meta = new.directory / "state.json"
    tmp = meta.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"generation": new.generation, "segments": new.segments,
                               "until_ms": until_ms, "max_offset": new.max_offset},
                              indent=1), encoding="utf-8")
    os.replace(tmp, meta)
    for stale in ("records", "pending"):
        shutil.rmtree(old.directory / f"{stale}-{old.generation}", ignore_errors=True)
    return new
