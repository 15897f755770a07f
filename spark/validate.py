"""The audit's arguments, checked before Spark starts (no JVM: a mistake fails in ms).

Each check raises :class:`AuditInputError` with one line that names the
argument. What only Spark can check (a database that does not answer, a
missing table, a Hadoop URI) is left to the run, which reports it the same way.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import urlsplit

from spark.errors import AuditInputError
from spark.segments import SEGMENT_NAME
from spark.session import DEFAULT_JARS
from spark.status_source import check_table

__all__ = ["check_args", "check_broker_side", "check_commitlog", "check_jdbc_url"]

_PG, _SQLITE = "jdbc:postgresql:", "jdbc:sqlite:"
_FORMS = "jdbc:postgresql://HOST[:PORT]/DB nor jdbc:sqlite:/PATH"
#: the Debian package holding each driver's jar (spark.session.DEFAULT_JARS)
_DRIVER_JARS = {_PG: (DEFAULT_JARS[0], "libpostgresql-jdbc-java"),
                _SQLITE: (DEFAULT_JARS[1], "libxerial-sqlite-jdbc-java")}


def _jdbc_hint(url: str) -> str:
    """What to write instead of a non-JDBC URL (credentials left out)."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme in ("postgresql", "postgres") and parts.hostname:
        port = f":{parts.port}" if parts.port else ""
        return (f"; for PostgreSQL write jdbc:postgresql://{parts.hostname}{port}{parts.path}"
                " (user and password go in --user and --password)")
    if scheme == "sqlite":
        return f"; for SQLite write jdbc:sqlite:{parts.path or '/PATH'}"
    return " (the audit reads PostgreSQL or SQLite only)"


def _check_pg_hosts(url: str, rest: str) -> None:
    hosts, _slash, _db = rest[2:].partition("/")
    if "@" in hosts:
        raise AuditInputError("--jdbc-url: put the user and password in --user and "
                              "--password (or ?user=...&password=...), not before the host")
    for host in hosts.split(","):
        name, port = host, ""
        if host.startswith("["):  # [IPv6]:port
            name, _bracket, tail = host[1:].partition("]")
            port = tail.removeprefix(":")
        elif ":" in host:
            name, _colon, port = host.rpartition(":")
        if not name or (port and not (port.isdigit() and 0 < int(port) < 65536)):
            raise AuditInputError(f"--jdbc-url: {url!r} has no valid HOST[:PORT]; "
                                  "expected jdbc:postgresql://HOST[:PORT]/DB")


def _sqlite_file(url: str, rest: str) -> None:
    path = rest.removeprefix("file:")
    if path.startswith("//"):
        path = urlsplit("file:" + path).path
    if path in ("", ":memory:") or path.startswith(":resource:"):
        raise AuditInputError(f"--jdbc-url: {url!r} names no SQLite file; "
                              "expected jdbc:sqlite:/PATH/TO/outbox.sqlite")
    if not Path(path).is_file():  # the driver would create an empty database there
        raise AuditInputError(f"--jdbc-url: no SQLite database at {path}")


def check_jdbc_url(url: str) -> None:
    """PostgreSQL or SQLite, in a form their JDBC drivers take; a SQLite file must exist."""
    base = url.split("?", 1)[0]
    if base.startswith(_PG):
        rest = base[len(_PG):]
        if rest.startswith("//"):
            _check_pg_hosts(base, rest)
        elif not rest or "/" in rest or ":" in rest:  # jdbc:postgresql:DB is the only other
            raise AuditInputError(f"--jdbc-url: {base!r} is not a PostgreSQL JDBC URL; "
                                  "expected jdbc:postgresql://HOST[:PORT]/DB")
    elif base.startswith(_SQLITE):
        _sqlite_file(base, base[len(_SQLITE):])
    else:
        shown = base if "@" not in base else urlsplit(base)._replace(
            netloc=urlsplit(base).hostname or "").geturl()
        raise AuditInputError(f"--jdbc-url: {shown!r} is neither {_FORMS}{_jdbc_hint(base)}")


def check_commitlog(text: str) -> None:
    """A local directory must exist and be a broker data dir or its commit log."""
    parts = urlsplit(text)
    if parts.scheme not in ("", "file"):
        return  # hdfs:, s3a:...: Hadoop lists them once Spark runs
    path = Path(parts.path if parts.scheme == "file" else text)
    if not path.exists():
        raise AuditInputError(f"--commitlog: no such directory: {text}")
    if not path.is_dir():
        raise AuditInputError(f"--commitlog: not a directory: {text}")
    if (path / "commitlog").is_dir() or path.name == "commitlog":
        return
    with os.scandir(path) as entries:
        if any(SEGMENT_NAME.match(e.name) and e.is_file() for e in entries):
            return
    raise AuditInputError(f"--commitlog: {text} is not a broker data directory (no "
                          "commitlog/ in it) nor a commit log (no 20-digit segment files)")


def _check_outputs(args: argparse.Namespace) -> None:
    for flag, path in (("--json", args.json), ("--html", args.html)):
        if path is not None and Path(path).is_dir():
            raise AuditInputError(f"{flag}: {path} is a directory; give a file name")
    for flag, path in (("--out", args.out), ("--state", args.state)):
        if path is not None and Path(path).exists() and not Path(path).is_dir():
            raise AuditInputError(f"{flag}: {path} is a file; give a directory")


def _check_jars(args: argparse.Namespace) -> None:
    if args.jars:
        for jar in filter(None, args.jars.split(",")):
            parts = urlsplit(jar)
            local = jar if parts.scheme in ("", "file") else None
            if local is not None and not Path(parts.path or local).is_file():
                raise AuditInputError(f"--jars: no such file: {jar}")
        return
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # under spark-submit: its --jars decide
        return
    for prefix, (jar, package) in _DRIVER_JARS.items():
        if args.jdbc_url.startswith(prefix) and not Path(jar).is_file():
            raise AuditInputError(f"--jdbc-url: its JDBC driver {jar} is not installed "
                                  f"(apt-get install {package}, or pass --jars)")


def check_broker_side(args: argparse.Namespace) -> None:
    """Exactly one of ``--commitlog`` and ``--broker-export``, and it is there (a broker
    export is read whole by :func:`check_args`, last)."""
    export = getattr(args, "broker_export", None)
    if args.commitlog is not None and export is not None:
        raise AuditInputError("give --commitlog DIR (broker_lite, RocketMQ) or --broker-export "
                              "PATH (any other target), not both", argument="--broker-export")
    if args.commitlog is None and export is None:
        raise AuditInputError("the broker's side is missing: give --commitlog DIR (broker_lite, "
                              "RocketMQ) or --broker-export PATH (any other target)",
                              argument="--commitlog")
    if export is None:
        check_commitlog(args.commitlog)
        return
    if args.state is not None:
        raise AuditInputError("--state works with --commitlog only (an export is read whole "
                              "each run); leave it out with --broker-export",
                              argument="--state")
    from spark.export_source import export_files

    export_files(export)


def check_args(args: argparse.Namespace) -> None:
    """Every check that needs no JVM, in the order of the arguments' help."""
    check_jdbc_url(args.jdbc_url)
    check_table(args.table)
    check_broker_side(args)
    if args.since is not None and args.until is not None and args.since >= args.until:
        raise AuditInputError("--since must be before --until")
    _check_outputs(args)
    _check_jars(args)
    if getattr(args, "broker_export", None) is not None:  # last: it reads the whole export
        from spark.export_source import check_export

        check_export(args.broker_export)
