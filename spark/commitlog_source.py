"""The broker's commit log as Spark DataFrames: listed through Hadoop, decoded in tasks.

Segments are listed with the Hadoop FileSystem API, so the directory may be
any URI Hadoop reads (``file:``, ``hdfs:``, ``s3a:``...). They are read with
``SparkContext.binaryFiles`` with one segment per partition, and each task
decodes its segment with :mod:`spark.segments` (which imports broker_lite's
record codec: on a cluster, ship ``broker_lite`` with ``--py-files``).
"""

from __future__ import annotations

from dataclasses import dataclass

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark.errors import AuditInputError
from spark.segments import PROBLEM, RECORD_FIELDS, SEGMENT_NAME, decode_segments

__all__ = ["RECORD_SCHEMA", "SegmentFile", "decode_files", "list_segments", "split_problems"]

_LONGS = {"offset", "store_ts", "born_ts", "prepared_offset", "body_crc"}
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


def decode_files(spark: SparkSession, files: list[SegmentFile]) -> DataFrame:
    """Decode ``files`` (one task per segment) into rows of :data:`RECORD_SCHEMA`."""
    if not files:
        return spark.createDataFrame([], RECORD_SCHEMA)
    paths = ",".join(f.path for f in files)
    raw = spark.sparkContext.binaryFiles(paths, minPartitions=len(files))
    rows = raw.repartition(len(files)) if raw.getNumPartitions() < len(files) else raw
    return spark.createDataFrame(rows.mapPartitions(decode_segments), RECORD_SCHEMA)


def split_problems(decoded: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(records, problems)``: problems keep ``segment``, ``offset`` and ``detail``."""
    records = decoded.where(decoded.kind != PROBLEM)
    problems = decoded.where(decoded.kind == PROBLEM).select("segment", "offset", "detail")
    return records, problems
