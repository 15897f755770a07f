"""Alembic environment for the rocketbox tables.

Run through :mod:`outbox.migrate` (or ``rocketbox migrate``), which builds the
Alembic configuration in code and passes an open connection in
``config.attributes["connection"]``; without one, the URL in the
``sqlalchemy.url`` option is used.

Only rocketbox's own tables are looked at: an application usually keeps its
business tables in the same database, and ``alembic check`` must neither
report them nor offer to drop them. The PostgreSQL sequence
``rocketbox_transaction_seq`` (used by :func:`outbox.publish`) is created by
the migration but not declared in the models, so autogenerate ignores it too.
"""

from __future__ import annotations

from typing import Any, Literal

from alembic import context
from sqlalchemy import Connection, MetaData, engine_from_config, pool
from sqlalchemy.schema import SchemaItem

from migrations import UNDECLARED, VERSION_TABLE
from outbox.models import metadata

try:
    from migrations import partial_where

    #: Alembic's own comparisons plus the partial-index predicate check
    PLUGINS: list[str] | None = ["alembic.autogenerate.*", partial_where.register()]
except ImportError:  # Alembic < 1.18 has no plugin API: predicates go unchecked
    PLUGINS = None

config = context.config
target_metadata: MetaData = metadata

NameKind = Literal["schema", "table", "column", "index", "unique_constraint",
                   "foreign_key_constraint"]


def include_name(name: str | None, type_: NameKind, parent_names: dict[str, Any]) -> bool:
    """Reflect only the default schema and the tables the models declare."""
    if type_ == "schema":
        return name is None
    if type_ == "table":
        return name in target_metadata.tables
    return name not in UNDECLARED


def include_object(obj: SchemaItem, name: str | None, type_: str, reflected: bool,
                   compare_to: SchemaItem | None) -> bool:
    """Second filter: rocketbox's tables and what hangs off them, minus undeclared objects."""
    if name in UNDECLARED:
        return False
    if type_ == "table":
        return name in target_metadata.tables
    table = getattr(obj, "table", None)
    table_name = getattr(table, "name", None)
    return table_name is None or table_name in target_metadata.tables


def _options() -> dict[str, Any]:
    options: dict[str, Any] = {
        "target_metadata": target_metadata,
        "version_table": VERSION_TABLE,
        "include_name": include_name,
        "include_object": include_object,
        "compare_type": True,
        "compare_server_default": True,
    }
    if PLUGINS is not None:
        options["autogenerate_plugins"] = PLUGINS
    return options


def run_migrations_offline() -> None:
    """Emit SQL to the output buffer instead of running it (``--sql``)."""
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True,
                      dialect_opts={"paramstyle": "named"}, **_options())
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    context.configure(connection=connection, **_options())
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run against the connection handed in, or one made from ``sqlalchemy.url``."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = engine_from_config(config.get_section(config.config_ini_section, {}),
                                prefix="sqlalchemy.", poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            _run_on(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
