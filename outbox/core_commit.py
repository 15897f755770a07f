"""Deprecated: the old name of :mod:`outbox.sqla_core_commit` (renamed for issue 30).

Every name is forwarded to :mod:`outbox.sqla_core_commit` with a DeprecationWarning;
import from there instead.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__: list[str] = []

_NEW = "outbox.sqla_core_commit"


def __getattr__(name: str) -> Any:
    """Forward *name* to the new module, warning that this one is deprecated."""
    if name.startswith("__"):
        raise AttributeError(name)
    warnings.warn(f"{__name__} is deprecated; import {name} from {_NEW}",
                  DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(_NEW), name)
