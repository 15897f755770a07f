"""Either broker's commit log as Spark DataFrames: listed through Hadoop, decoded in splits.

Segments (broker_lite's ``commitlog/`` or Apache RocketMQ's ``store/commitlog/``)
are listed with the Hadoop FileSystem API, so the directory may be any URI
Hadoop reads. Each segment is cut into byte ranges of ``split_bytes``
(default 64 MiB; Spark conf ``spark.rocketbox.audit.splitBytes``), one task
each: a 1 GiB RocketMQ segment is 16 tasks, never one blob in memory. Tasks
read their range with ranged reads through pyarrow's file systems (local
paths, ``hdfs:``, ``s3:``) and decode it with :mod:`spark.segments`, which
imports broker_lite's record codec: on a cluster, ship ``broker_lite`` with
``--py-files``.
"""

from __future__ import annotations

from dataclasses import dataclass

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark.errors import AuditInputError
from spark.segments import PROBLEM, RECORD_FIELDS, SEGMENT_NAME, decode_splits

__all__ = ["DEFAULT_SPLIT_BYTES", "RECORD_SCHEMA", "SegmentFile", "decode_files",
           "list_segments", "split_problems", "splits_of"]

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
SPLIT_CONF = "spark.rocketbox.audit.splitBytes"
_LONGS = {"offset", "store_ts", "born_ts", "prepared_offset", "body_crc", "queue_id",
          "queue_offset", "check_times"}
RECORD_SCHEMA = StructType([
    StructField(name, LongType() if name in _LONGS else StringType(), nullable=False)
    for name in RECORD_FIELDS
])


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One commit-log segment as the file system lists it."""

    name: str  # 20-digit start offset
    path: str  # full URI
    size: int


def list_segments(spark: SparkSession, directory: str) -> list[SegmentFile]:
    """The segment files under ``directory`` (or ``directory/commitlog``), by start offset."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    root = jvm.org.apache.hadoop.fs.Path(directory)
    try:
        fs = root.getFileSystem(conf)
        nested = jvm.org.apache.hadoop.fs.Path(root, "commitlog")
        if fs.exists(nested) and fs.getFileStatus(nested).isDirectory():
            root = nested
        if not fs.exists(root):
            raise AuditInputError(f"--commitlog: no such directory: {directory}")
        statuses = fs.listStatus(root)
    except AuditInputError:
        raise
    except Py4JError as exc:  # Java's exceptions: keep their first line
        raise AuditInputError(f"--commitlog: cannot list {directory}: "
                              f"{str(exc).splitlines()[0]}") from exc
    found = [SegmentFile(s.getPath().getName(), s.getPath().toString(), int(s.getLen()))
             for s in statuses if s.isFile() and SEGMENT_NAME.match(s.getPath().getName())]
    return sorted(found, key=lambda f: f.name)


def splits_of(files: list[SegmentFile], split_bytes: int) -> list[tuple[str, str, int, int]]:
    """``(uri, name, lo, hi)`` byte ranges covering every file (an empty file: one range)."""
    if split_bytes <= 0:
        raise AuditInputError(f"{SPLIT_CONF} must be positive, not {split_bytes}")
    return [(f.path, f.name, lo, min(lo + split_bytes, f.size))
            for f in files for lo in range(0, max(f.size, 1), split_bytes)]


def decode_files(spark: SparkSession, files: list[SegmentFile],
                 split_bytes: int | None = None) -> DataFrame:
    """Decode ``files`` (one task per byte range) into rows of :data:`RECORD_SCHEMA`."""
    if not files:
        return spark.createDataFrame([], RECORD_SCHEMA)
    if split_bytes is None:
        split_bytes = int(spark.conf.get(SPLIT_CONF, str(DEFAULT_SPLIT_BYTES)) or 0)
    splits = splits_of(files, split_bytes)
    rdd = spark.sparkContext.parallelize(splits, numSlices=len(splits))
    return spark.createDataFrame(rdd.mapPartitions(decode_splits), RECORD_SCHEMA)


def split_problems(decoded: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(records, problems)``: problems keep ``segment``, ``offset`` and ``detail``."""
    records = decoded.where(decoded.kind != PROBLEM)
    problems = decoded.where(decoded.kind == PROBLEM).select("segment", "offset", "detail")
    return records, problems
