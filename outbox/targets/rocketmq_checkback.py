"""Answering RocketMQ 5's check-backs from the status table, per half.

RocketMQ stores every half it is sent: a half re-sent after an ambiguous
failure (a send that timed out after the proxy stored it, a relay killed
before it recorded the answer) is a second half for the same row, and a
check-back that answered COMMIT for both would make two messages. So the
answer is per half, keyed on the half's message id (its UNIQ_KEY, which is
RocketMQ's transaction id for it):

* the row recorded this half's ids, its state is COMMIT and the proxy took
  its end less than ``Outbox.handoff_window`` ago: ROLLBACK. RocketMQ writes
  the op record closing a half in batches (``transactionOpBatchInterval``,
  3 s), so a half whose commit is already written can still be checked; the
  check renews the half, and the op record of the end names only the first
  copy, so the renewed copy would be checked until some answer ends it. A
  COMMIT would write the message a second time (apache/rocketmq #5574,
  #8158); ROLLBACK closes the renewed copy and leaves the commit alone;
* the row recorded this half's ids otherwise: the row's state, by the same
  rules as broker_lite's check-back (:func:`outbox.checkback_rules.check_state`);
* the row recorded another half: ROLLBACK (this one is a duplicate);
* the row recorded none yet: ROLLBACK if the row says ROLLBACK, otherwise
  UNKNOWN (a relay may be recording it right now; the proxy asks again);
* no row: :func:`~outbox.checkback_rules.check_state` (the writing transaction's
  fate, or the half's age past ``local_tx_timeout``).

These are RocketMQ's own rules (:func:`per_half`), run first by the one
check-back rule set every target shares (:func:`outbox.checkback_rules.answer_checkback`),
which also ages the half by the broker's store time, counts the answer
(``observe_checkback``) and logs it, a malformed xid included.
:class:`StatusTableChecker` is the official client's ``TransactionChecker``
doing that; :mod:`outbox.targets.rocketmq_responder` runs it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rocketmq import Message, TransactionChecker, TransactionResolution
from sqlalchemy import select

from outbox.checkback_rules import (
    PG_XID_PROPERTY,
    CheckAnswer,
    CheckQuestion,
    HalfRule,
    answer_checkback,
)
from outbox.config import Outbox
from outbox.models import aware
from outbox.models import transaction_table as t
from outbox.targets.base import TX_ID_PROPERTY
from outbox.targets.rocketmq import RESOLUTIONS

__all__ = ["RULES", "StatusTableChecker", "answer_half", "handed_off", "per_half",
           "question_of"]



def per_half(outbox: Outbox, question: CheckQuestion, now: datetime) -> CheckAnswer | None:
    """RocketMQ's rules for the half ``question.half_id`` of its row (module doc);
    None when the rules every target shares decide."""
    with outbox.engine.connect() as conn:
        row = conn.execute(select(t.c.state, t.c.half_message_id, t.c.relayed_at,
                                  t.c.commit_offset)
                           .where(t.c.tx_id == question.tx_id)).first()
    if row is None:
        return None
    if row.half_message_id is not None and row.half_message_id != question.half_id:
        return CheckAnswer("ROLLBACK", f"another half ({row.half_message_id}) is the row's")
    if row.half_message_id is None and row.state != "ROLLBACK":
        return CheckAnswer("UNKNOWN", "the row has recorded no half yet")
    if row.state == "COMMIT" and handed_off(row.relayed_at, row.commit_offset):
        since = (now - aware(row.relayed_at)).total_seconds()
        if since < outbox.handoff_window:
            return CheckAnswer("ROLLBACK", f"the proxy took this half's COMMIT {since:.1f}s "
                                           f"ago (< handoff_window {outbox.handoff_window:g}s):"
                                           " its op record may not be written yet, and the "
                                           "commit is the message")
    return None


#: RocketMQ's rules, before the shared ones
RULES: tuple[HalfRule, ...] = (per_half,)


def answer_half(outbox: Outbox, question: CheckQuestion, *,
                now: float | None = None) -> CheckAnswer:
    """The answer to a RocketMQ check-back: its rules, then the shared ones."""
    return answer_checkback(outbox, question, rules=RULES, now=now)


def handed_off(relayed_at: datetime | None, commit_offset: int | None) -> bool:
    """The relay marked the row relayed because the proxy answered OK to its end.

    The relay writes ``commit_offset`` -1 for an end the proxy took (RocketMQ
    gives no offset) and leaves it NULL for a row it marks relayed because the
    proxy no longer held the transaction (the check-back owns that half), so
    ``relayed_at`` is then the hand-off time, give or take the relay's own
    bookkeeping (it is written after the end's answer, never before).
    """
    return relayed_at is not None and commit_offset is not None


def question_of(message: Message) -> CheckQuestion:
    """The official client's check-back message as the seam's question."""
    return CheckQuestion(tx_id=message.properties.get(TX_ID_PROPERTY) or None,
                         half_id=message.message_id,
                         raw_pg_xid=message.properties.get(PG_XID_PROPERTY),
                         stored_at_ms=_store_ms(message) or message.born_timestamp or 0)


def _store_ms(message: Message) -> int | None:
    """The proxy's store time of the half (ms). The client decodes it from the message's
    system properties but gives it no public property (5.0.x), so it is read by name."""
    stored = getattr(message, "store_timestamp", None)
    if stored is None:
        stored = getattr(message, "_Message__store_timestamp", None)
    return int(stored) if isinstance(stored, int) and stored > 0 else None


class StatusTableChecker(TransactionChecker):  # type: ignore[misc]  # the client is untyped
    """The official client's checker, answering each half from the status table.

    A half without :data:`~outbox.targets.rocketmq.TX_ID_PROPERTY` is not
    rocketbox's: UNKNOWN (another producer of the topic may know it). A
    database error is UNKNOWN too: the proxy asks again.
    """

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        self.answered: dict[str, int] = {"COMMIT": 0, "ROLLBACK": 0, "UNKNOWN": 0}

    def check(self, message: Message) -> Any:
        answer = answer_half(self.outbox, question_of(message))
        self.answered[answer.state] += 1
        return RESOLUTIONS.get(answer.state,
                               TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED)
