"""``rocketbox audit`` / ``spark-submit spark/audit_job.py``: the consistency audit.

Reads the outbox status table over JDBC and the broker's commit-log segments
(or, for a target without one, a broker export), classifies every tx_id
(:mod:`spark.classify`), and writes the divergent rows (Parquet), a JSON
summary, an offline HTML report and a console table.

Exit codes: 0 clean; 1 any divergence (parked and undelivered rows included:
they need someone to act) or a corrupt commit log; 2 bad usage or an input that
cannot be read (one line on stderr; ``--debug`` for the traceback). Arguments
are checked before Spark starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # spark-submit spark/audit_job.py: make ``spark`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from spark.errors import AuditInputError

__all__ = ["build_parser", "main", "parse_time"]


def parse_time(text: str) -> int:
    """Epoch ms from ISO 8601 (naive means UTC) or from epoch seconds."""
    try:
        return int(float(text) * 1000)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither ISO 8601 nor epoch seconds") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _number(cast: Callable[[str], float], what: str, minimum: float) -> Callable[[str], Any]:
    """An argparse type: ``cast`` the text, refuse it below ``minimum``."""
    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be >= {minimum:g}")
        return value
    return parse


_seconds = _number(float, "a number of seconds", 0)
_positive = _number(int, "a whole number", 1)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AuditInputError(message)  # main prefixes "rocketbox audit: "


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rocketbox audit", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("inputs")
    src.add_argument("--jdbc-url", required=True, metavar="URL",
                     help="jdbc:postgresql://HOST:PORT/DB or jdbc:sqlite:/PATH")
    src.add_argument("--table", default="rocketbox_transaction", metavar="NAME",
                     help="the outbox status table (default: rocketbox_transaction)")
    src.add_argument("--user", metavar="NAME",
                     help="database user (default: the one in --jdbc-url, if any)")
    src.add_argument("--password", default=os.environ.get("ROCKETBOX_AUDIT_PASSWORD"),
                     help="database password (default: $ROCKETBOX_AUDIT_PASSWORD; keep it off "
                          "the command line)")
    src.add_argument("--partitions", type=_positive, default=4, metavar="N",
                     help="parallel JDBC reads on seq (PostgreSQL; default: 4)")
    src.add_argument("--commitlog", metavar="DIR",
                     help="broker_lite's or RocketMQ's data dir or its commitlog/ (any Hadoop "
                          "URI); or else --broker-export")
    src.add_argument("--broker-export", metavar="PATH",
                     help="what any other target's broker committed: a JSON Lines export "
                          "(rocketbox broker-export) or a directory of *.jsonl "
                          "(docs/audit.md, 'Broker export'); or else --commitlog")
    rules = p.add_argument_group("rules")
    rules.add_argument("--grace", type=_seconds, default=60.0, metavar="S",
                       help="younger in-flight transactions are pending, not "
                            "undelivered or lost (default: 60)")
    rules.add_argument("--slo", type=_seconds, default=5.0, metavar="S",
                       help="commit-to-visible time over this is late (default: 5)")
    rules.add_argument("--stuck-after", type=_seconds, default=600.0, metavar="S",
                       help="an unresolved half older than this is stuck "
                            "(tx_timeout + check_interval * check_max, plus slack; "
                            "default: 600)")
    rules.add_argument("--since", type=parse_time, metavar="TIME",
                       help="keep transactions whose event time (DB created_at) is at or "
                            "after TIME: ISO 8601 (naive is UTC) or epoch seconds (default: "
                            "all; with --state, the previous run's end)")
    rules.add_argument("--until", type=parse_time, metavar="TIME",
                       help="keep those before TIME, same forms (default: no upper bound)")
    rules.add_argument("--as-of", type=parse_time, metavar="TIME",
                       help="the audit's 'now' (default: the start of the run)")
    out = p.add_argument_group("outputs")
    out.add_argument("--out", type=Path, metavar="DIR", help="Parquet of the divergent rows")
    out.add_argument("--json", type=Path, metavar="FILE", help="JSON summary")
    out.add_argument("--html", type=Path, metavar="FILE", help="offline HTML report")
    out.add_argument("--state", type=Path, metavar="DIR", help="incremental mode state")
    out.add_argument("--quiet", action="store_true",
                     help="no console table, and none of Java's or Spark's warnings "
                          "(errors still show)")
    run = p.add_argument_group("running")
    run.add_argument("--master", metavar="URL",
                     help="Spark master when not under spark-submit (default: local[*])")
    run.add_argument("--jars", metavar="JARS",
                     help="comma-separated JDBC jars (default: the Debian ones)")
    run.add_argument("--shuffle-partitions", type=_positive, metavar="N",
                     help="spark.sql.shuffle.partitions (default: 2 x cores in local mode)")
    run.add_argument("--progress", action="store_true", help="show Spark's progress bars")
    run.add_argument("--spark-ui", action="store_true",
                     help="start Spark's web UI (off by default; in local mode it listens "
                          "on 127.0.0.1 only, like the rest of the driver)")
    run.add_argument("--debug", action="store_true", help="tracebacks on errors")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if "-h" in argv or "--help" in argv:
            build_parser().print_help()
            return 0
        args = build_parser().parse_args(argv)
        from spark.validate import check_args

        check_args(args)  # before the JVM starts: a wrong argument fails at once
        warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
        from spark.run import run_audit

        return run_audit(args)
    except AuditInputError as exc:
        if debug:
            traceback.print_exc()
        print(f"rocketbox audit: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
