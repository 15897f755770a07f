"""Old module names kept as deprecated aliases (issue 30's renames).

An old module is one line, ``__getattr__ = forwarder(__name__, "outbox.new")``:
every name asked of it comes from the new module, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["forwarder"]


def forwarder(old: str, new: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old`` that forwards to ``new``, warning."""

    def forward(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        warnings.warn(f"{old} is deprecated; import {name} from {new}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(new), name)

    return forward
