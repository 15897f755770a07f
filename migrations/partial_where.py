"""An Alembic autogenerate plugin: compare the WHERE clause of partial indexes.

Alembic compares an index's name, columns and uniqueness, but not the
predicate of a partial index (``postgresql_where`` / ``sqlite_where``). The
relay's pending index only works while its predicate matches the claim query,
so ``alembic check`` must notice when it drifts: a differing predicate comes
out as the index dropped and created again.

Predicates are compared after normalising what databases do to them when
they store them: parentheses, whitespace and case.
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Any

from alembic.autogenerate.api import AutogenContext
from alembic.operations import ops
from alembic.runtime.plugins import Plugin
from alembic.util import PriorityDispatchResult
from sqlalchemy import Index, Table

__all__ = ["PLUGIN_NAME", "normalise", "register", "setup"]

PLUGIN_NAME = "rocketbox.partial_index_where"
_DIALECTS = ("postgresql", "sqlite")


def normalise(predicate: Any) -> str | None:
    """A predicate as comparable text: no parentheses, single spaces, lower case."""
    if predicate is None:
        return None
    text = str(predicate)
    text = re.sub(r"[()]", " ", text)
    text = re.sub(r"\s+", " ", text).strip().lower()
    return text or None


def _where(index: Index, dialect: str) -> str | None:
    return normalise(index.dialect_kwargs.get(f"{dialect}_where"))


def _compare(autogen_context: AutogenContext, modify_ops: ops.ModifyTableOps,
             schema: str | None, tname: str, conn_table: Table | None,
             metadata_table: Table | None) -> PriorityDispatchResult:
    dialect = autogen_context.dialect.name if autogen_context.dialect else ""
    if conn_table is None or metadata_table is None or dialect not in _DIALECTS:
        return PriorityDispatchResult.CONTINUE
    reflected = {ix.name: ix for ix in conn_table.indexes}
    for index in metadata_table.indexes:
        found = reflected.get(index.name)
        if found is None:
            continue  # a missing or extra index is alembic's own business
        if _where(found, dialect) != _where(index, dialect):
            modify_ops.ops.append(ops.DropIndexOp.from_index(found))
            modify_ops.ops.append(ops.CreateIndexOp.from_index(index))
    return PriorityDispatchResult.CONTINUE


def setup(plugin: Plugin) -> None:
    """Plugin entry point (Alembic's convention)."""
    plugin.add_autogenerate_comparator(_compare, "table", "partial_index_where")


def register() -> str:
    """Register the plugin once per process; returns its name for ``autogenerate_plugins``."""
    with contextlib.suppress(ValueError):  # already registered by an earlier run
        Plugin.setup_plugin_from_module(sys.modules[__name__], PLUGIN_NAME)
    return PLUGIN_NAME
