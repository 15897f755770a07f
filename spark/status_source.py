"""The outbox status table (``rocketbox_transaction``) over JDBC.

PostgreSQL is read in parallel: ``partitionColumn`` is the numeric ``seq``,
bounded by a ``min/max`` query, over ``numPartitions`` reads. SQLite (the
embedded setup) is read by the xerial driver in one partition; its
``DATETIME`` text is parsed here. Only the columns the audit needs are read,
and the body is hashed in Spark (``sha2(body, 256)``), as the tasks hash the
broker's bodies.
"""

from __future__ import annotations

from dataclasses import dataclass

from py4j.protocol import Py4JError, Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.errors import AuditInputError

__all__ = ["DRIVERS", "JdbcSource", "read_status"]

#: JDBC URL prefix -> driver class (Debian: libpostgresql-jdbc-java, libxerial-sqlite-jdbc-java)
DRIVERS = {"jdbc:postgresql:": "org.postgresql.Driver", "jdbc:sqlite:": "org.sqlite.JDBC"}
_COLUMNS = "tx_id, seq, topic, state, body, created_at"


@dataclass(frozen=True, slots=True)
class JdbcSource:
    """Where the status table is."""

    url: str
    table: str = "rocketbox_transaction"
    user: str | None = None
    password: str | None = None
    num_partitions: int = 4

    @property
    def driver(self) -> str:
        for prefix, driver in DRIVERS.items():
            if self.url.startswith(prefix):
                return driver
        raise AuditInputError(f"--jdbc-url: {self.url.split('?')[0]!r} is neither "
                              "jdbc:postgresql://HOST/DB nor jdbc:sqlite:/PATH")

    @property
    def is_sqlite(self) -> bool:
        return self.url.startswith("jdbc:sqlite:")


def _first_line(exc: BaseException) -> str:
    """The Java exception's own message (its causes' when it has none), one line."""
    if isinstance(exc, Py4JJavaError):
        cause = exc.java_exception
        while cause is not None:
            message = cause.getMessage()
            if message:
                return str(message).strip().splitlines()[0]
            cause = cause.getCause()
    text = str(exc).strip() or type(exc).__name__
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("java.", "org.", "py4j.")) and ": " in line:
            return line.split(": ", 1)[1]
        if line:
            return line
    return text


def _options(source: JdbcSource) -> dict[str, str]:
    opts = {"url": source.url, "driver": source.driver}
    if source.user:
        opts["user"] = source.user
    if source.password:
        opts["password"] = source.password
    return opts


def _bounds(spark: SparkSession, source: JdbcSource) -> tuple[int, int] | None:
    query = f"SELECT MIN(seq) AS lo, MAX(seq) AS hi FROM {source.table}"
    row = spark.read.format("jdbc").options(**_options(source)).option("query", query) \
        .load().first()
    if row is None or row["lo"] is None:
        return None
    return int(row["lo"]), int(row["hi"])


def read_status(spark: SparkSession, source: JdbcSource) -> DataFrame:
    """``tx_id, state, db_topic, created_ms, db_body_sha256, db_body_crc`` of every row.

    Raises :class:`AuditInputError` (one line) for a wrong URL, a database
    that does not answer, or a missing table.
    """
    if not source.table.replace("_", "").replace(".", "").isalnum():
        raise AuditInputError(f"--table: {source.table!r} is not a plain table name")
    try:
        if source.is_sqlite:
            raw = spark.read.format("jdbc").options(**_options(source)) \
                .option("query", f"SELECT {_COLUMNS} FROM {source.table}") \
                .option("customSchema", "created_at STRING, seq LONG").load()
            created = F.to_timestamp(F.col("created_at"))
        else:
            bounds = _bounds(spark, source)
            reader = spark.read.format("jdbc").options(**_options(source)) \
                .option("dbtable", f"(SELECT {_COLUMNS} FROM {source.table}) AS status")
            if bounds is not None and source.num_partitions > 1:
                reader = reader.options(partitionColumn="seq", lowerBound=str(bounds[0]),
                                        upperBound=str(bounds[1] + 1),
                                        numPartitions=str(source.num_partitions))
            raw = reader.load()
            created = F.col("created_at")
        status = raw.select(
            F.col("tx_id"), F.col("state"), F.col("topic").alias("db_topic"),
            F.floor(F.unix_micros(created.cast("timestamp")) / 1000).alias("created_ms"),
            F.sha2(F.col("body"), 256).alias("db_body_sha256"),
            F.crc32(F.col("body")).alias("db_body_crc"),
        )
        status.schema  # noqa: B018 - resolves the query now: a missing table fails here
    except (PySparkException, Py4JError) as exc:
        raise AuditInputError(f"status table {source.table!r} at "
                              f"{source.url.split('?')[0]}: {_first_line(exc)}") from exc
    return status
