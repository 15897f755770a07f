"""broker_lite's leaf: the values and the vocabulary every layer shares.

Below the storage engine, the core, the protocol and the client, and importing
nothing of broker_lite but :mod:`broker_lite.errors` (and msgspec):

- :mod:`~broker_lite.values.messages`: the message and request values the core
  takes and returns, which the native protocol encodes as they are;
- :mod:`~broker_lite.values.names`: the broker's own topics, the retry and
  dead-letter prefixes, RocketMQ's topic rule and the default message size;
- :mod:`~broker_lite.values.properties`: the message property names and their
  ``key\\x01value\\x02`` encoding.

This package imports none of its modules, so a client that needs one name
loads only that module (never the store's mmap, flush or recovery code).
"""

from __future__ import annotations
