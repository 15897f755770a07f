"""Half first: RocketMQ's own flow, with the status table as the listener's memory (§2B).

:func:`send_in_transaction` runs one unit of work this way:

1. open the DB transaction and read its PostgreSQL xid
   (``pg_current_xact_id()``);
2. send the half through the target's seam
   (:class:`~outbox.targets.broker_lite.ProducerSeam` over ``producer``),
   carrying the xid in :data:`~outbox.checkback_rules.PG_XID_PROPERTY`
   (a failed send rolls back and raises: the work never runs);
3. run ``fn(session)`` and write the status row (``state=COMMIT``, the
   half's ``tx_id``) in that same transaction, and commit;
4. end the transaction ``COMMIT`` (directly, or through the Celery task
   ``rocketbox.end_transaction`` when an app is given), and mark the row
   relayed (:func:`outbox.ending.end_then_mark`, as the decorators do).

``fn`` raising rolls the DB back and ends the transaction ``ROLLBACK`` (then
re-raises). A failed commit asks the database: ``aborted`` gives
``ROLLBACK``, ``committed`` gives ``COMMIT``, anything else ``UNKNOWN`` (the
check-back decides). If the process dies anywhere in between, the broker's
check-back asks a responder, which reads the table and, with no row, the
xid's ``pg_xact_status``.

The status row also makes the relay a backup for step 4: it is written with
the half's offset and a ``next_attempt_at`` ``sweep_after`` seconds out, so
a lost end-transaction is redone (idempotently) by the sweeper.

:class:`SqlStatusListener` is the stock listener for the seed API
(``TransactionProducer(group, SqlStatusListener(outbox))`` and
``send_message_in_transaction(msg, fn)``); there the half is sent before the
DB transaction opens, so it carries no xid and check-back falls back to the
half's age (``local_tx_timeout``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from broker_lite.client import (
    LocalTransactionState,
    Message,
    ReceivedMessage,
    SendResult,
    TransactionProducer,
)
from outbox.checkback_rules import PG_XID_PROPERTY
from outbox.config import Outbox
from outbox.ending import end_then_mark
from outbox.models import transaction_table as t
from outbox.publish import CURRENT_XID_SQL, new_tx_id, publish
from outbox.targets.base import HalfStored, LeftToCheckback, TxEnd, TxEnded
from outbox.targets.broker_lite import STATE_NAMES, ProducerSeam
from outbox.targets.broker_lite_checkback import answer_check

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["HalfFirstResult", "SqlStatusListener", "send_in_transaction"]

log = logging.getLogger("rocketbox.half_first")

T = TypeVar("T")
COMMIT = LocalTransactionState.COMMIT_MESSAGE
ROLLBACK = LocalTransactionState.ROLLBACK_MESSAGE
UNKNOWN = LocalTransactionState.UNKNOW
#: properties the broker or we set; not copied into the status row's headers
_SYSTEM_PROPERTIES = frozenset({PG_XID_PROPERTY, "UNIQ_KEY", "__transactionId__", "TRAN_MSG",
                                "PGROUP", "REAL_TOPIC", "REAL_QID"})


@dataclass(frozen=True, slots=True)
class HalfFirstResult(Generic[T]):
    """How one :func:`send_in_transaction` went.

    ``end_outcome`` is the broker's answer (``"committed"``,
    ``"rolled_back"``), ``"enqueued"`` when the Celery task will end it, or
    ``None`` when nothing was sent (``UNKNOWN``, or the request failed): the
    check-back, or the relay for a committed row, resolves it then.
    """

    tx_id: str
    state: LocalTransactionState
    half: SendResult
    value: T | None
    end_outcome: str | None


def _current_xid(session: Session) -> int | None:
    conn = session.connection()
    if conn.dialect.name != "postgresql":
        return None
    xid = conn.execute(text(f"SELECT {CURRENT_XID_SQL}")).scalar()
    return int(xid) if xid is not None else None


def _xact_status(engine: Engine, xid: int | None) -> str | None:
    """``pg_xact_status`` of ``xid`` on a fresh connection (None when unknown)."""
    if xid is None or engine.dialect.name != "postgresql":
        return None
    try:
        with engine.connect() as conn:
            status = conn.execute(text("SELECT pg_xact_status(CAST(:x AS xid8))"),
                                  {"x": str(xid)}).scalar()
    except Exception:
        log.warning("could not ask the database about transaction %s", xid, exc_info=True)
        return None
    return str(status) if status is not None else None


def _write_status(outbox: Outbox, session: Session, message: Message, tx_id: str,
                  half_offset: int | None) -> None:
    """The status row, in the caller's transaction; the relay holds off for ``sweep_after``."""
    headers = {k: v for k, v in message.properties.items() if k not in _SYSTEM_PROPERTIES}
    conn = session.connection()  # a bare connection: no on_commit relay task for this row
    publish(conn, message.topic, message.body, outbox=outbox, tag=message.tags,
            keys=list(message.keys) or None, message_group=message.sharding_key,
            headers=headers or None, tx_id=tx_id, state="COMMIT")
    later = datetime.now(UTC) + timedelta(seconds=outbox.relay.sweep_after)
    conn.execute(update(t).where(t.c.tx_id == tx_id).values(half_offset=half_offset,
                                                            next_attempt_at=later))


def _commit(outbox: Outbox, session: Session, tx_id: str,
            xid: int | None) -> LocalTransactionState:
    try:
        session.commit()
    except Exception:
        status = _xact_status(outbox.engine, xid)
        log.exception("commit of transaction %s failed; the database says %s", tx_id,
                      status or "nothing")
        if status == "aborted":
            return ROLLBACK
        return COMMIT if status == "committed" else UNKNOWN
    return COMMIT


def _end(outbox: Outbox, seam: ProducerSeam, state: LocalTransactionState, half: HalfStored,
         celery_app: Celery | None) -> str | None:
    """End the transaction (or enqueue that); returns the outcome, None if nothing was done."""
    if state is UNKNOWN:
        return None
    end = TxEnd(half, STATE_NAMES[state])
    outcomes = end_then_mark(outbox, [end], seam.end_transactions, celery_app=celery_app)
    if outcomes is None or isinstance(outcomes, str):
        return outcomes
    [outcome] = outcomes
    if isinstance(outcome, TxEnded):
        return "committed" if state is COMMIT else "rolled_back"
    return "unknown" if isinstance(outcome, LeftToCheckback) else None


def send_in_transaction(outbox: Outbox, producer: TransactionProducer, message: Message,
                        fn: Callable[[Session], T], *,
                        celery_app: Celery | None = None) -> HalfFirstResult[T]:
    """Run ``fn(session)`` as the local transaction of a half-first message (module doc).

    ``producer`` must be started and belong to ``outbox.producer_group`` (its
    listener, e.g. :class:`SqlStatusListener`, answers check-backs). The
    ``tx_id`` is ``message.msg_id`` or a new one. Raises the send error (the
    work never ran) or ``fn``'s exception (after ending ``ROLLBACK``).
    """
    if producer.group != outbox.producer_group:
        log.warning("producer group %r is not the outbox's %r: check-backs go elsewhere",
                    producer.group, outbox.producer_group)
    tx_id = message.msg_id or new_tx_id()
    seam = ProducerSeam(producer)  # sends and ends go through the target's seam
    with outbox.sessionmaker()() as session:
        session.begin()
        xid = _current_xid(session)
        properties = dict(message.properties)
        if xid is not None:
            properties[PG_XID_PROPERTY] = str(xid)
        try:
            half, sent = seam.send_half(message.replace(properties=properties), tx_id=tx_id)
        except BaseException:
            session.rollback()
            raise
        try:
            value = fn(session)
            _write_status(outbox, session, message, tx_id, half.half_offset)
        except BaseException:
            session.rollback()
            log.info("local transaction %s failed: ROLLBACK", tx_id, extra={"tx_id": tx_id})
            _end(outbox, seam, ROLLBACK, half, celery_app)
            raise
        state = _commit(outbox, session, tx_id, xid)
    outcome = _end(outbox, seam, state, half, celery_app)
    return HalfFirstResult(tx_id=tx_id, state=state, half=sent,
                           value=value if state is COMMIT else None, end_outcome=outcome)


class SqlStatusListener:
    """The stock transaction listener: the local transaction writes the status row.

    ``execute_local_transaction(msg, fn)`` runs ``fn(session)`` and the status
    row in one DB transaction (``fn`` raising: ``ROLLBACK``);
    ``check_local_transaction`` answers from the table.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        if not callable(arg):
            raise TypeError("SqlStatusListener needs the local work as arg: fn(session)")
        tx_id = msg.transaction_id or msg.msg_id
        with self.outbox.sessionmaker()() as session:
            session.begin()
            try:
                arg(session)
                _write_status(self.outbox, session, msg, tx_id, None)
            except Exception:
                session.rollback()
                log.exception("local transaction %s failed: ROLLBACK", tx_id)
                return ROLLBACK
            return _commit(self.outbox, session, tx_id, None)

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        return answer_check(self.outbox, msg)[0]
