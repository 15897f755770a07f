"""broker_lite's check-back: a producer of the outbox's group answering from the status table.

When a half message stays unresolved past the broker's ``tx_timeout`` (the
relay died between the half and end-transaction, or a half-first process
died with its DB transaction open), broker_lite sends
``CHECK_TRANSACTION_STATE`` to a live producer of the half's group. The
:class:`CheckbackResponder` is such a producer: a broker_lite
:class:`~broker_lite.client.TransactionProducer` registered under
``outbox.producer_group`` whose :class:`StatusTableListener` answers by the
one check-back rule set (:func:`outbox.checkback_rules.answer_checkback`; broker_lite
has no rules of its own: a half is stored once per ``tx_id``). The half's
age comes from the broker's store time.

:func:`serve` runs a responder until stopped (``rocketbox checker`` through
:func:`outbox.checkback_runner.run_checker`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from broker_lite.client import (
    ClientConfig,
    LocalTransactionState,
    Message,
    ReceivedMessage,
    TransactionProducer,
)
from broker_lite.errors import BrokerError, NoPermissionError, UnauthorizedError
from outbox.checkback_rules import (
    PG_XID_PROPERTY,
    CheckAnswer,
    CheckQuestion,
    answer_checkback,
    parse_pg_xid,
)
from outbox.config import Outbox
from outbox.errors import ConfigurationError
from outbox.targets.base import tx_state
from outbox.targets.broker_lite import LOCAL_STATES, broker_client_config

__all__ = ["CheckbackResponder", "StatusTableListener", "answer_check", "half_pg_xid",
           "question_of", "serve"]

log = logging.getLogger("rocketbox.checker")

def half_pg_xid(msg: ReceivedMessage | Message) -> int | None:
    """The PostgreSQL xid a half carries (:data:`PG_XID_PROPERTY`), if any."""
    return parse_pg_xid(msg.properties.get(PG_XID_PROPERTY), msg.msg_id or "")


def question_of(msg: ReceivedMessage) -> CheckQuestion:
    """broker_lite's check-back of ``msg`` as the seam's question (the row is its
    transaction id; the age is from the store time)."""
    return CheckQuestion(tx_id=msg.transaction_id or msg.dedupe_key, half_id=msg.msg_id,
                         raw_pg_xid=msg.properties.get(PG_XID_PROPERTY),
                         stored_at_ms=msg.store_timestamp or msg.born_timestamp,
                         check_times=msg.check_times)


def answer_check(outbox: Outbox, msg: ReceivedMessage, *,
                 now: float | None = None) -> tuple[LocalTransactionState, CheckAnswer]:
    """What the status table says about the half ``msg``, as a broker state and a reason."""
    answer = answer_checkback(outbox, question_of(msg), now=now)
    return LOCAL_STATES[tx_state(answer.state)], answer


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
                     self.outbox.producer_group, self.outbox.broker_display)

    def shutdown(self) -> None:
        if self._started:
            self._started = False
            self.producer.shutdown()

    def __enter__(self) -> CheckbackResponder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def serve(outbox: Outbox, stop: threading.Event, on_ready: Callable[[], None] | None, *,
          threads: int, retry_interval: float) -> None:
    """Run a :class:`CheckbackResponder` until ``stop`` is set.

    While the broker is unreachable at start it tries again after
    ``retry_interval`` seconds, doubling up to 2 s; ``on_ready`` is called once
    connected. Refused credentials or a refused producer group are not an
    outage: :class:`~outbox.errors.ConfigurationError`, naming the setting.
    """
    responder = CheckbackResponder(outbox, threads=threads)
    delay = retry_interval
    while not stop.is_set():
        try:
            responder.start()
            break
        except (UnauthorizedError, NoPermissionError) as exc:
            responder.shutdown()
            raise ConfigurationError(
                f"broker {outbox.broker_display} refused the check-back responder as producer "
                f"group {outbox.producer_group!r} "
                f"(--access-key/--secret-key, --group; the broker's "
                f"ACL): {exc}", setting="producer_group") from None
        except BrokerError as exc:
            log.warning("broker %s unreachable (%s); retrying in %.1fs", outbox.broker_display,
                        exc, delay)
            responder = CheckbackResponder(outbox, threads=threads)
            stop.wait(delay)
            delay = min(max(2.0, retry_interval), delay * 2)
    if stop.is_set():
        responder.shutdown()
        return
    try:
        if on_ready is not None:
            on_ready()
        stop.wait()
    finally:
        responder.shutdown()
    log.info("check-back responder stopped (answered: %s)",
             {s.value: n for s, n in responder.checks_answered.items()})
