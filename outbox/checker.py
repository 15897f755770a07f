"""The check-back responder: answers the broker's questions about orphaned halves.

When a half message stays unresolved past the broker's ``tx_timeout`` (the
relay died between the half and end-transaction, or a half-first process
died with its DB transaction open), the broker sends
``CHECK_TRANSACTION_STATE`` to a live producer of the half's group. The
:class:`CheckbackResponder` is such a producer: a broker_lite
:class:`~broker_lite.client.TransactionProducer` registered under
``outbox.producer_group`` whose listener answers from the status table
(:func:`outbox.checkback.check_state`, docs/design.md §3C):

* a ``COMMIT`` / ``ROLLBACK`` row gives that state;
* no row gives ``ROLLBACK`` once the database proves the writing transaction
  is gone (``pg_xact_status`` of the xid in the half's
  :data:`~outbox.checkback.PG_XID_PROPERTY`, or the half's age past
  ``local_tx_timeout``);
* anything else is ``UNKNOWN`` and the broker asks again later.

The half's age comes from the broker's store time (clock skew between
producers does not matter). :func:`run_checker` runs a responder until it is
stopped or the process gets SIGTERM (``rocketbox checker``); the Celery
worker can run one too (:mod:`outbox.celery.bootstep`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from broker_lite.client import (
    ClientConfig,
    LocalTransactionState,
    Message,
    ReceivedMessage,
    TransactionProducer,
)
from broker_lite.errors import BrokerError
from outbox.checkback import PG_XID_PROPERTY, CheckAnswer, check_state
from outbox.config import Outbox
from outbox.metrics import observe_checkback
from outbox.targets.broker_lite import broker_client_config

__all__ = ["CheckbackResponder", "StatusTableListener", "answer_check", "run_checker"]

log = logging.getLogger("rocketbox.checker")

_STATES = {
    "COMMIT": LocalTransactionState.COMMIT_MESSAGE,
    "ROLLBACK": LocalTransactionState.ROLLBACK_MESSAGE,
}


def half_pg_xid(msg: ReceivedMessage | Message) -> int | None:
    """The PostgreSQL xid a half carries (:data:`PG_XID_PROPERTY`), if any."""
    raw = msg.properties.get(PG_XID_PROPERTY)
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        log.warning("half %s carries a malformed %s: %r", msg.msg_id, PG_XID_PROPERTY, raw)
        return None


def answer_check(outbox: Outbox, msg: ReceivedMessage, *,
                 now: float | None = None) -> tuple[LocalTransactionState, CheckAnswer]:
    """What the status table says about the half ``msg``, as a broker state and a reason."""
    tx_id = msg.transaction_id or msg.dedupe_key
    stamp = msg.store_timestamp or msg.born_timestamp
    age = max(0.0, (time.time() if now is None else now) - stamp / 1000) if stamp else 0.0
    answer = check_state(outbox.engine, tx_id, pg_xid=half_pg_xid(msg), half_age_seconds=age,
                         local_tx_timeout=outbox.local_tx_timeout)
    state = _STATES.get(answer.state, LocalTransactionState.UNKNOW)
    observe_checkback(answer.state)  # it never raises
    log.info("check-back %s (check %d, %.1fs old): %s (%s)", tx_id, msg.check_times, age,
             answer.state, answer.reason,
             extra={"tx_id": tx_id, "state": answer.state, "check_times": msg.check_times})
    return state, answer


class StatusTableListener:
    """A transaction listener that only answers check-backs, from the status table.

    ``execute_local_transaction`` is not used by the responder (it never sends
    halves); it answers ``UNKNOW`` so that a misuse is resolved by check-back.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        log.warning("the check-back responder does not run local transactions (%s)", msg.msg_id)
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return answer_check(self.outbox, msg)[0]


class CheckbackResponder:
    """A producer of ``outbox.producer_group`` that answers the broker's check-backs.

    ``start()`` connects (raising the broker's error when it cannot);
    afterwards the client reconnects by itself when the broker restarts.
    ``threads`` bounds how many check-backs run at once.
    """

    def __init__(self, outbox: Outbox, *, threads: int = 4,
                 client_config: ClientConfig | None = None) -> None:
        self.outbox = outbox
        self.listener = StatusTableListener(outbox)
        config = client_config or broker_client_config(outbox)
        self.producer = TransactionProducer(
            outbox.producer_group, self.listener, outbox.broker,
            check_threads=(1, max(1, threads)), access_key=outbox.access_key,
            secret_key=outbox.secret_key, config=config)
        self._started = False

    @property
    def checks_answered(self) -> dict[LocalTransactionState, int]:
        """How many check-backs this responder answered, by state."""
        return self.producer.checks_answered

    def start(self) -> None:
        if not self._started:
            self.producer.start()
            self._started = True
            log.info("check-back responder for group %s ready at %s",
                     self.outbox.producer_group, self.outbox.broker)

    def shutdown(self) -> None:
        if self._started:
            self._started = False
            self.producer.shutdown()

    def __enter__(self) -> CheckbackResponder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


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
    """Run a :class:`CheckbackResponder` until ``stop`` is set or SIGTERM/SIGINT; returns 0.

    While the broker is unreachable at start it tries again after
    ``retry_interval`` seconds, doubling up to 2 s. ``on_ready`` is called once
    connected (the CLI prints a ready line there).
    """
    stop = stop or threading.Event()
    if outbox.target_address.is_rocketmq:
        return _run_rocketmq_checker(outbox, stop, on_ready)
    with _stop_on_signals(stop):
        responder = CheckbackResponder(outbox, threads=threads)
        delay = retry_interval
        while not stop.is_set():
            try:
                responder.start()
                break
            except BrokerError as exc:
                log.warning("broker %s unreachable (%s); retrying in %.1fs", outbox.broker,
                            exc, delay)
                responder = CheckbackResponder(outbox, threads=threads)
                stop.wait(delay)
                delay = min(max(2.0, retry_interval), delay * 2)
        if stop.is_set():
            responder.shutdown()
            return 0
        try:
            if on_ready is not None:
                on_ready()
            stop.wait()
        finally:
            responder.shutdown()
    log.info("check-back responder stopped (answered: %s)",
             {s.value: n for s, n in responder.checks_answered.items()})
    return 0


def _run_rocketmq_checker(outbox: Outbox, stop: threading.Event,
                          on_ready: Callable[[], None] | None) -> int:
    """``run_checker`` for RocketMQ 5 proxies (:mod:`outbox.targets.rocketmq_responder`)."""
    # loaded for a rocketmq:// address only (outbox.targets.choose says why)
    from outbox.targets.rocketmq_responder import RocketMQResponder

    responder = RocketMQResponder(outbox)
    with _stop_on_signals(stop):
        responder.refresh()
        if on_ready is not None:
            on_ready()
        responder.serve(stop)
    log.info("check-back responder stopped (answered: %s)", responder.checks_answered)
    return 0
