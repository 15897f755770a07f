"""The Spark consistency audit: outbox tables joined with the broker's commit log.

broker_lite's log and Apache RocketMQ 5's alike; each record is mapped to its
outbox row by the ``ROCKETBOX_TX_ID`` property the relay sets on every target.

The public names below load on first use (PEP 562), so ``import spark`` does
not start py4j or pyspark: ``rocketbox audit`` checks its arguments first and
reports a missing Java or pyspark in one line. The command line is
``spark.audit_job``; what each category means is in docs/audit.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark.categories import CATEGORIES, DIVERGENT
    from spark.errors import AuditError, AuditInputError
    from spark.run import run_audit

__all__ = ["CATEGORIES", "DIVERGENT", "AuditError", "AuditInputError", "run_audit"]

#: public name -> the module that defines it
_HOME = {"CATEGORIES": "spark.categories", "DIVERGENT": "spark.categories",
         "AuditError": "spark.errors", "AuditInputError": "spark.errors",
         "run_audit": "spark.run"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'spark' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
