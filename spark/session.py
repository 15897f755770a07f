"""The SparkSession the audit runs in: JDBC jars on the classpath, quiet logs, no open ports.

In local mode the driver listens on loopback only (``spark.driver.host`` and
``spark.driver.bindAddress`` = 127.0.0.1, and ``SPARK_LOCAL_IP`` for what
reads that), and the web UI is off unless asked for (``ui=True``, the audit's
``--spark-ui``), in which case it too listens on 127.0.0.1 (port 4040 or the
next free one).

``quiet_jvm=True`` (the audit's ``--quiet``) starts the JVM at ERROR and with
its standard error through :func:`jvm_stderr_filter`, which drops the JVM's
own ``WARNING:`` lines (``Using incubator modules``...) and log4j's ``WARN``
lines, and passes every other line on (errors stay visible).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

__all__ = ["DEFAULT_JARS", "LOCAL_HOST", "LOG4J_CONFIG", "LOG4J_QUIET", "WARN_LINE",
           "build_session", "default_jars", "jvm_stderr_filter", "quiet"]

#: the Debian packages' JDBC drivers (libpostgresql-jdbc-java, libxerial-sqlite-jdbc-java)
DEFAULT_JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/sqlite-jdbc.jar")
#: Spark's logging at WARN, without the start-up chatter
LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"
#: the same at ERROR (``--quiet``)
LOG4J_QUIET = Path(__file__).resolve().parent / "log4j2-quiet.properties"
#: a warning line of the JVM (``WARNING: ...``) or of log4j, in our pattern or Spark's default
WARN_LINE = re.compile(rb"^(WARNING: |(\d\d/\d\d/\d\d )?\d\d:\d\d:\d\d WARN |"
                       rb"Setting default log level|To adjust logging level)")
#: where a local-mode driver listens
LOCAL_HOST = "127.0.0.1"


def default_jars() -> list[str]:
    return [j for j in DEFAULT_JARS if Path(j).exists()]


def build_session(*, master: str | None = None, jars: list[str] | None = None,
                  progress: bool = False, shuffle_partitions: int | None = None,
                  ui: bool = False, app_name: str = "rocketbox-audit",
                  quiet_jvm: bool = False) -> SparkSession:
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
        log4j = LOG4J_QUIET if quiet_jvm else LOG4J_CONFIG
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile=file:{log4j}")
    builder = builder.config("spark.ui.showConsoleProgress", str(progress).lower()) \
        .config("spark.sql.session.timeZone", "UTC")
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if quiet_jvm:
        with jvm_stderr_filter():
            session = builder.getOrCreate()
    else:
        session = builder.getOrCreate()
    quiet(session, "ERROR" if quiet_jvm else "WARN")
    return session


def _forward(read_fd: int, write_fd: int) -> None:
    with os.fdopen(read_fd, "rb") as lines:
        for line in lines:
            if not WARN_LINE.match(line):
                os.write(write_fd, line)
    os.close(write_fd)


@contextmanager
def jvm_stderr_filter() -> Iterator[None]:
    """While inside, file descriptor 2 is a pipe read by a thread that drops warning lines.

    Processes started inside (the JVM) keep the pipe as their standard error
    for good; this process gets its own back on the way out. The thread
    passes every other line on to the original standard error and ends when
    the last holder of the pipe (the JVM) exits.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    read_fd, write_fd = os.pipe()
    threading.Thread(target=_forward, args=(read_fd, os.dup(saved)), daemon=True,
                     name="jvm-stderr-filter").start()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet(session: SparkSession, level: str = "WARN") -> None:
    """Spark's log noise down to ``level``, and UTC timestamps."""
    session.sparkContext.setLogLevel(level)
    session.conf.set("spark.sql.session.timeZone", "UTC")
