"""The worker's consumer, reconnecting to a lost Celery broker within a second.

Celery's consumer retries a lost broker connection with kombu's default
schedule: 2, 4, 6 ... up to 30 seconds between attempts, so a Redis that is
back after 3 s is used again only after 6 s, and after a longer outage up to
30 s late. :class:`Consumer` (the app's ``worker_consumer``) retries after
0.1 s, then every ``RECONNECT_STEP`` more, at most every
``RECONNECT_MAX`` seconds: one cheap connection attempt a second while the
broker is down. The sweeper lane relays meanwhile, so nothing waits on this
but the tasks.
"""

from __future__ import annotations

import functools
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

__all__ = ["RECONNECT_MAX", "RECONNECT_START", "RECONNECT_STEP", "Consumer"]

RECONNECT_START = 0.1
RECONNECT_STEP = 0.5
RECONNECT_MAX = 1.0


class Consumer(CeleryConsumer):  # type: ignore[misc]
    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(
            conn.ensure_connection, interval_start=RECONNECT_START,
            interval_step=RECONNECT_STEP, interval_max=RECONNECT_MAX)
        return super().ensure_connected(conn)
