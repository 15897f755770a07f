"""The names of the broker's own topics and of each group's retry and dead-letter topics.

Written once, in the leaf :mod:`broker_lite.values.names` (which the client may
import without loading the store); re-exported here for the store's modules.
"""

from __future__ import annotations

from broker_lite.values import names as _leaf
from broker_lite.values.names import *  # noqa: F403

__all__ = _leaf.__all__
