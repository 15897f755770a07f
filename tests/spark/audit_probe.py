"""Run the audit's ``main`` in a child process and ask it whether Spark ever started.

A usage error must come before PySpark launches its JVM gateway; the child
prints ``gateway: None`` when it never did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["probe"]

ROOT = Path(__file__).resolve().parents[2]
#: runs the audit's main, then says whether PySpark launched a JVM gateway
_PROBE = """
import sys
from spark.audit_job import main
code = main(sys.argv[1:])
from pyspark import SparkContext
print("gateway:", SparkContext._gateway)
sys.exit(code)
"""


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    """``spark/audit_job.py ARGS`` in a child; its output ends with the gateway line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", _PROBE, *args], env=env, text=True,
                          capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
                          check=False)
