"""One SparkSession for every spark test: local[2], 4 shuffle partitions, no UI."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterator

import pytest

warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    from pyspark.sql import SparkSession

    from spark.session import default_jars

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import broker_lite
    session = (SparkSession.builder.master("local[2]").appName("rocketbox-audit-tests")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.jars", ",".join(default_jars()))
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
