"""``rocketbox checker``: answer the broker's questions about orphaned halves.

When a half message stays unresolved past the broker's transaction timeout
(the relay died between the half and end-transaction, or a half-first
process died with its DB transaction open), the broker asks a live producer
what became of it. :func:`run_checker` runs such a producer for the outbox's
broker, whichever kind it is: the target's
:class:`~outbox.targets.choose.TargetSupport` serves the check-backs
(broker_lite: :mod:`outbox.targets.broker_lite_checkback`; RocketMQ 5:
:mod:`outbox.targets.rocketmq_responder`), and every target answers by the one
rule set of :mod:`outbox.checkback_rules` (docs/design.md §3C):

* a ``COMMIT`` / ``ROLLBACK`` row gives that state;
* no row gives ``ROLLBACK`` once the database proves the writing transaction
  is gone (``pg_xact_status`` of the xid in the half's
  :data:`~outbox.checkback_rules.PG_XID_PROPERTY`, or the half's age past
  ``local_tx_timeout``);
* anything else is ``UNKNOWN`` and the broker asks again later;
* a target's own rules come first (RocketMQ's per-half rules and hand-off
  window, :mod:`outbox.targets.rocketmq_checkback`).

The half's age comes from the broker's store time (clock skew between
producers does not matter). :func:`run_checker` runs until it is stopped or
the process gets SIGTERM; the Celery worker can run one too
(:mod:`outbox.celery.bootstep`). ``CheckbackResponder``,
``StatusTableListener`` and ``answer_check`` (broker_lite's) are re-exported
here under their old names.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

from outbox.config import Outbox
from outbox.targets.broker_lite_checkback import (
    CheckbackResponder,
    StatusTableListener,
    answer_check,
    half_pg_xid,
)
from outbox.targets.choose import support_for

__all__ = ["CheckbackResponder", "StatusTableListener", "answer_check", "half_pg_xid",
           "run_checker"]

log = logging.getLogger("rocketbox.checker")


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Set ``stop`` on SIGTERM/SIGINT while inside (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping the check-back responder", signum)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_checker(outbox: Outbox, *, stop: threading.Event | None = None,
                on_ready: Callable[[], None] | None = None, threads: int = 4,
                retry_interval: float = 1.0) -> int:
    """Answer ``outbox.broker``'s check-backs until ``stop`` is set or SIGTERM/SIGINT; returns 0.

    While the broker is unreachable at start it tries again (broker_lite: after
    ``retry_interval`` seconds, doubling up to 2 s). ``on_ready`` is called once
    serving (the CLI prints a ready line there).
    """
    stop = stop or threading.Event()
    support = support_for(outbox)
    with _stop_on_signals(stop):
        support.serve_checkbacks(outbox, stop, on_ready, threads=threads,
                                 retry_interval=retry_interval)
    return 0
