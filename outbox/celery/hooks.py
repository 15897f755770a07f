"""The ``Outbox.on_commit`` hook that enqueues ``rocketbox.relay`` after a commit.

It never raises into the caller's commit: when the Celery broker (Redis, or
the SQLite queue table) cannot take the task, it logs a warning and returns,
and the beat sweeper relays the rows a few seconds later. Nothing is lost,
because the rows are already committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from celery import Celery

from outbox.celery.tasks import RELAY_TASK

__all__ = ["celery_on_commit"]

log = logging.getLogger("rocketbox.celery")


def celery_on_commit(app: Celery) -> Callable[[Sequence[str]], None]:
    """The callable for ``Outbox(on_commit=...)``: one ``rocketbox.relay`` task per commit."""

    def on_commit(tx_ids: Sequence[str]) -> None:
        ids = list(tx_ids)
        if not ids:
            return
        try:
            app.tasks[RELAY_TASK].apply_async(args=[ids], retry=False)
        except Exception as exc:  # never into the commit: the sweeper relays these rows
            log.warning("could not enqueue %s for %d message(s), the sweeper will relay them: "
                        "%s", RELAY_TASK, len(ids), exc, extra={"tx_ids": ids})

    return on_commit
