"""Message property names and their wire encoding, for the store's modules.

Written once, in the leaf :mod:`broker_lite.values.properties` (which the client
may import without loading the store); re-exported here.
"""

from __future__ import annotations

from broker_lite.values import properties as _leaf
from broker_lite.values.properties import *  # noqa: F403

__all__ = _leaf.__all__
