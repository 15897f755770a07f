"""Compare two databases' rocketbox schemas through SQLAlchemy's inspector."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Engine, inspect, text

from migrations import VERSION_TABLE


def _where(index: dict[str, Any]) -> str | None:
    options = index.get("dialect_options") or {}
    for key in ("postgresql_where", "sqlite_where"):
        if options.get(key) is not None:
            return re.sub(r"\s+", " ", re.sub(r"[()]", " ", str(options[key]))).strip().lower()
    return None


def rocketbox_tables(engine: Engine) -> list[str]:
    return sorted(name for name in inspect(engine).get_table_names()
                  if name.startswith("rocketbox_") and name != VERSION_TABLE)


def schema_snapshot(engine: Engine) -> dict[str, Any]:
    """Tables, columns (type, nullability, default), indexes (with predicate), keys."""
    insp = inspect(engine)
    snapshot: dict[str, Any] = {}
    for table in rocketbox_tables(engine):
        pk = insp.get_pk_constraint(table)
        snapshot[table] = {
            "columns": [(c["name"], c["type"].compile(dialect=engine.dialect), c["nullable"],
                         None if c.get("default") is None else str(c["default"]))
                        for c in insp.get_columns(table)],
            "indexes": sorted((ix["name"], tuple(ix["column_names"]), bool(ix["unique"]),
                               _where(ix)) for ix in insp.get_indexes(table)),
            "primary_key": (pk.get("name"), tuple(pk["constrained_columns"])),
            "unique": sorted((u["name"], tuple(u["column_names"]))
                             for u in insp.get_unique_constraints(table)),
            "foreign_keys": sorted((f["name"], tuple(f["constrained_columns"]))
                                   for f in insp.get_foreign_keys(table)),
            "storage": _storage(engine, table),
        }
    return snapshot


def _storage(engine: Engine, table: str) -> list[str]:
    """PostgreSQL's storage parameters of ``table`` (``fillfactor=50``), sorted."""
    if engine.dialect.name != "postgresql":
        return []
    with engine.connect() as conn:
        options = conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = :t"),
                               {"t": table}).scalar()
    return sorted(options or [])


def sequences(engine: Engine) -> list[str]:
    if engine.dialect.name != "postgresql":
        return []
    return sorted(name for name in inspect(engine).get_sequence_names()
                  if name.startswith("rocketbox_"))


def functions(engine: Engine) -> list[tuple[str, str]]:
    """rocketbox's PostgreSQL functions: (name, argument types)."""
    if engine.dialect.name != "postgresql":
        return []
    with engine.connect() as conn:
        return sorted((name, args) for name, args in conn.execute(text(
            "SELECT proname, pg_get_function_identity_arguments(oid) FROM pg_proc "
            "WHERE proname LIKE 'rocketbox\\_%'")).all())
