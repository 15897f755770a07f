"""The SparkSession the audit runs in: JDBC jars on the classpath, quiet logs, no open ports.

In local mode the driver listens on loopback only (``spark.driver.host`` and
``spark.driver.bindAddress`` = 127.0.0.1, and ``SPARK_LOCAL_IP`` for what
reads that), and the web UI is off unless asked for (``ui=True``, the audit's
``--spark-ui``), in which case it too listens on 127.0.0.1 (port 4040 or the
next free one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

__all__ = ["DEFAULT_JARS", "LOCAL_HOST", "LOG4J_CONFIG", "build_session", "default_jars",
           "quiet"]

#: the Debian packages' JDBC drivers (libpostgresql-jdbc-java, libxerial-sqlite-jdbc-java)
DEFAULT_JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/sqlite-jdbc.jar")
#: Spark's logging at WARN, without the start-up chatter
LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
#: where a local-mode driver listens
LOCAL_HOST = "127.0.0.1"


def default_jars() -> list[str]:
    return [j for j in DEFAULT_JARS if Path(j).exists()]


def build_session(*, master: str | None = None, jars: list[str] | None = None,
                  progress: bool = False, shuffle_partitions: int | None = None,
                  ui: bool = False, app_name: str = "rocketbox-audit") -> SparkSession:
    """The active session if there is one (spark-submit, tests), else a new one.

    ``master`` applies only when nothing set ``spark.master`` (spark-submit does);
    the default is ``local[*]``. The UI is off unless ``ui``; in local mode every
    port the driver opens is on loopback.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        quiet(active)
        return active
    conf = SparkConf()
    builder = SparkSession.builder.appName(app_name)
    if not conf.contains("spark.master"):
        builder = builder.master(master or "local[*]")
    elif master:
        builder = builder.master(master)
    chosen = default_jars() if jars is None else jars
    if chosen:
        previous = conf.get("spark.jars", "") or ""
        builder = builder.config("spark.jars", ",".join(filter(None, [previous, *chosen])))
    local = (master or conf.get("spark.master", "local")).startswith("local")
    if local and not shuffle_partitions and not conf.contains("spark.sql.shuffle.partitions"):
        shuffle_partitions = 2 * (os.cpu_count() or 2)  # not 200 tiny tasks per shuffle
    if local:
        # local executors run this interpreter, so they import broker_lite from its venv
        # (PySpark reads only the environment variable for the workers' Python)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # the JVM inherits it: the web UI binds to SPARK_LOCAL_IP (else 0.0.0.0)
        os.environ["SPARK_LOCAL_IP"] = LOCAL_HOST
        builder = builder.config("spark.driver.host", LOCAL_HOST) \
            .config("spark.driver.bindAddress", LOCAL_HOST)
    if ui or not conf.contains("spark.ui.enabled"):
        builder = builder.config("spark.ui.enabled", str(ui).lower())
    if not conf.contains("spark.driver.extraJavaOptions"):
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}")
    builder = builder.config("spark.ui.showConsoleProgress", str(progress).lower()) \
        .config("spark.sql.session.timeZone", "UTC")
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    session = builder.getOrCreate()
    quiet(session)
    return session


def quiet(session: SparkSession, level: str = "WARN") -> None:
    """Spark's log noise down to ``level``, and UTC timestamps."""
    session.sparkContext.setLogLevel(level)
    session.conf.set("spark.sql.session.timeZone", "UTC")
