"""Alembic migrations for the rocketbox tables (``env.py``, ``versions/``).

This package ships in the wheel; :func:`script_location` finds it wherever it
was installed, so :mod:`outbox.migrate` never needs an ``alembic.ini``. The
outbox names it by its resource name (``migrations:``) and never imports it:
this package imports the outbox's tables, not the other way round.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from outbox.models import VERSION_TABLE

__all__ = ["UNDECLARED", "VERSION_TABLE", "script_location"]

#: created by the migrations (PostgreSQL only) but not declared in outbox.models,
#: so autogenerate must not offer to drop it
UNDECLARED = frozenset({"rocketbox_transaction_seq"})


def script_location() -> Path:
    """The directory holding ``env.py``, ``script.py.mako`` and ``versions/``."""
    root = importlib.resources.files(__name__)
    path = Path(str(root))
    if not (path / "env.py").is_file():
        raise RuntimeError(f"rocketbox migrations not found on disk at {path} "
                           "(zipped installs are not supported)")
    return path
