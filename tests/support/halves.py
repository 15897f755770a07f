"""Count the halves a broker in proxy mode stored, from its log.

``broker-lite serve --grpc-proxy-semantics`` logs one line per half it stores,
on the ``broker_lite.grpc.halves`` logger::

    ... INFO broker_lite.grpc.halves: half stored {"topic":"Payments","keys":["row-7"],
    "transaction_id":"...","message_id":"...","queue_offset":3,"commit_log_offset":1234}

(one line in the log). :func:`halves_stored` parses them from the broker's stderr
(``BrokerLiteServer.stderr_text()``), so a test can assert "no second half was
ever sent for this row".
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["halves_stored"]

_LINE = re.compile(r"broker_lite\.grpc\.halves: half stored (\{.*\})\s*$", re.MULTILINE)


def halves_stored(log_text: str, *, topic: str | None = None,
                  key: str | None = None) -> list[dict[str, Any]]:
    """The halves logged in ``log_text``, in order; only ``topic``'s / those with ``key``."""
    halves = [json.loads(match) for match in _LINE.findall(log_text)]
    return [h for h in halves
            if (topic is None or h["topic"] == topic) and (key is None or key in h["keys"])]
