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

from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark.errors import AuditInputError, java_cause

__all__ = ["BOOKKEEPING", "DRIVERS", "JdbcSource", "check_table", "read_status"]

#: JDBC URL prefix -> driver class (Debian: libpostgresql-jdbc-java, libxerial-sqlite-jdbc-java)
DRIVERS = {"jdbc:postgresql:": "org.postgresql.Driver", "jdbc:sqlite:": "org.sqlite.JDBC"}
_COLUMNS = ("tx_id, seq, topic, state, body, created_at, attempts, "
            "CASE WHEN parked THEN 1 ELSE 0 END AS parked, relayed_at, next_attempt_at, "
            "SUBSTR(last_error, 1, 500) AS last_error")
#: SQLite's declared types say little (DATETIME is text, an expression has none)
_SQLITE_TYPES = ("seq LONG, created_at STRING, attempts INT, parked INT, relayed_at STRING, "
                 "next_attempt_at STRING, last_error STRING")
#: the relay's bookkeeping, as :func:`read_status` returns it (``classify`` fills in
#: nulls when a status DataFrame from elsewhere lacks them)
BOOKKEEPING = {"attempts": "int", "parked": "boolean", "relayed_ms": "long",
               "next_attempt_ms": "long", "last_error": "string"}


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


def check_table(name: str) -> None:
    """``--table`` must be a plain (optionally schema-qualified) name: it goes into SQL."""
    if not name.replace("_", "").replace(".", "").isalnum():
        raise AuditInputError(f"--table: {name!r} is not a plain table name")


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
    """``tx_id, state, db_topic, created_ms, db_body_sha256, db_body_crc`` and the
    relay's :data:`BOOKKEEPING` of every row.

    Raises :class:`AuditInputError` (one line) for a wrong URL, a database
    that does not answer, or a missing table.
    """
    check_table(source.table)
    try:
        if source.is_sqlite:
            raw = spark.read.format("jdbc").options(**_options(source)) \
                .option("query", f"SELECT {_COLUMNS} FROM {source.table}") \
                .option("customSchema", _SQLITE_TYPES).load()

            def stamp(name: str) -> Column:
                return F.to_timestamp(F.col(name))
        else:
            bounds = _bounds(spark, source)
            reader = spark.read.format("jdbc").options(**_options(source)) \
                .option("dbtable", f"(SELECT {_COLUMNS} FROM {source.table}) AS status")
            if bounds is not None and source.num_partitions > 1:
                reader = reader.options(partitionColumn="seq", lowerBound=str(bounds[0]),
                                        upperBound=str(bounds[1] + 1),
                                        numPartitions=str(source.num_partitions))
            raw = reader.load()

            def stamp(name: str) -> Column:
                return F.col(name)

        def ms(name: str) -> Column:
            return F.floor(F.unix_micros(stamp(name).cast("timestamp")) / 1000)

        status = raw.select(
            F.col("tx_id"), F.col("state"), F.col("topic").alias("db_topic"),
            ms("created_at").alias("created_ms"),
            F.sha2(F.col("body"), 256).alias("db_body_sha256"),
            F.crc32(F.col("body")).alias("db_body_crc"),
            F.col("attempts").cast("int").alias("attempts"),
            (F.col("parked").cast("int") != 0).alias("parked"),
            ms("relayed_at").alias("relayed_ms"),
            ms("next_attempt_at").alias("next_attempt_ms"),
            F.col("last_error").cast("string").alias("last_error"),
        )
        status.schema  # noqa: B018 - resolves the query now: a missing table fails here
    except (PySparkException, Py4JError) as exc:
        raise AuditInputError(f"status table {source.table!r} at "
                              f"{source.url.split('?')[0]}: {java_cause(exc)}") from exc
    return status
