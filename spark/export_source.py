"""A broker export (``--broker-export PATH``) as the facts the classifier reads.

A target without a commit log the audit can decode (NATS JetStream,
RabbitMQ) hands the audit an export: JSON Lines of
:class:`~outbox.broker_export.ExportedMessage` (docs/audit.md, "Broker export:
auditing any target"). Each exported message is one *committed* message: the
broker has no halves, op records or discards, so :func:`export_facts` gives
:func:`spark.classify.classify` the same columns as
:func:`spark.classify.broker_facts` with those left empty, and the categories
that need them (``stuck_half``, ``discarded``) never come up. ``lost``,
``phantom``, ``duplicate`` (two messages with one ``tx_id``: the broker did not
de-duplicate), ``payload_mismatch`` and ``late`` are decided exactly as on a
commit log, with the broker's ``position`` strings where a commit log has
offsets.

The export is checked whole on the driver before Spark starts
(:func:`check_export`: one line naming the file, line and field); the tasks then
read one file each, so an export split into several ``*.jsonl`` files in a
directory is read in parallel. The files must be at a path every executor
sees (local mode: any local path), and the executors import
:mod:`outbox.broker_export` (on a cluster, ship ``outbox`` with ``--py-files``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from outbox.broker_export import ExportFormatError, read_export
from spark.errors import AuditInputError

__all__ = ["EXPORT_SCHEMA", "EXPORT_SUFFIX", "check_export", "export_facts", "export_files",
           "read_messages"]

#: the files of an export directory that are read (others are left alone)
EXPORT_SUFFIX = ".jsonl"
#: one row per exported message (the export's five fields)
EXPORT_SCHEMA = StructType([
    StructField("tx_id", StringType(), nullable=False),
    StructField("position", StringType(), nullable=False),
    StructField("time_ms", LongType(), nullable=False),
    StructField("body_sha256", StringType(), nullable=False),
    StructField("destination", StringType(), nullable=False),
])


def export_files(text: str) -> list[Path]:
    """The export's files: ``text`` itself, or the ``*.jsonl`` files of that directory,
    by name. Raises :class:`AuditInputError` naming ``--broker-export`` when there is none."""
    path = Path(text)
    if not path.exists():
        raise AuditInputError(f"--broker-export: no such file or directory: {text}",
                              argument="--broker-export")
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.name.endswith(EXPORT_SUFFIX)
                       and p.is_file())
        if not found:
            raise AuditInputError(f"--broker-export: {text} holds no *{EXPORT_SUFFIX} file",
                                  argument="--broker-export")
        return found
    if not path.is_file():
        raise AuditInputError(f"--broker-export: not a file or directory: {text}",
                              argument="--broker-export")
    return [path]


def check_export(text: str) -> int:
    """Read the whole export once, on the driver; returns how many messages it holds.

    A bad line is one :class:`AuditInputError` naming ``--broker-export``, the
    file, the line and the field (:class:`~outbox.broker_export.ExportFormatError`).
    """
    count = 0
    for path in export_files(text):
        try:
            for _message in read_export(path):
                count += 1
        except ExportFormatError as exc:
            raise AuditInputError(f"--broker-export: {exc}",
                                  argument="--broker-export") from exc
        except OSError as exc:
            raise AuditInputError(f"--broker-export: cannot read {path}: {exc.strerror or exc}",
                                  argument="--broker-export") from exc
    return count


def _read_files(paths: Iterable[str]) -> Iterator[tuple[str, str, int, str, str]]:
    """A task: the messages of its files, as rows of :data:`EXPORT_SCHEMA`."""
    for path in paths:
        for m in read_export(Path(path)):
            yield m.tx_id, m.position, m.time_ms, m.body_sha256, m.destination


def read_messages(spark: SparkSession, files: list[Path]) -> DataFrame:
    """Every exported message of ``files``, one task per file."""
    if not files:
        return spark.createDataFrame([], EXPORT_SCHEMA)
    names = [str(p.resolve()) for p in files]
    rdd = spark.sparkContext.parallelize(names, numSlices=len(names))
    return spark.createDataFrame(rdd.mapPartitions(_read_files), EXPORT_SCHEMA)


def export_facts(messages: DataFrame) -> DataFrame:
    """One row per ``tx_id`` of what the export says, in :func:`spark.classify.broker_facts`'s
    columns: every message is a commit (``commit_offsets``: the positions, by store
    time); the first one stored gives the time, destination and body hash."""
    first = F.min(F.struct("time_ms", "position", "destination", "body_sha256"))
    facts = messages.groupBy("tx_id").agg(
        first.alias("_first"),
        F.count(F.lit(1)).alias("n_commits"),
        F.array_sort(F.collect_list(F.struct("time_ms", "position"))).alias("_all"),
    )
    none_long, none_text = F.lit(None).cast("long"), F.lit(None).cast("string")
    return facts.select(
        "tx_id",
        none_long.alias("half_offset"),
        none_long.alias("half_ts"),
        none_text.alias("half_topic"),
        "n_commits",
        F.transform("_all", lambda s: s["position"]).alias("commit_offsets"),
        F.col("_first.time_ms").alias("commit_ts"),
        F.col("_first.destination").alias("commit_topic"),
        F.col("_first.body_sha256").alias("broker_body_sha256"),
        F.lit(True).alias("op_commit"),
        F.lit(False).alias("rolled_back"),
        F.lit(False).alias("discarded"),
        none_long.alias("discard_offset"),
        none_long.alias("discard_ts"),
        F.lit(0).cast("long").alias("checks"),
    )
