"""The records a transaction writes, in RocketMQ 5's own model.

The transaction service (:mod:`~broker_lite.core.transactions`) decides;
these functions write what RocketMQ's ``TransactionalMessageBridge`` and
``EndTransactionProcessor`` write, so RocketMQ's tools read a broker_lite log
and the audit reads either broker's:

* :func:`write_half` (:func:`half_record`): a half on ``RMQ_SYS_TRANS_HALF_TOPIC``
  queue 0 with the transaction bits of its sysflag cleared, ``REAL_TOPIC``/``REAL_QID``
  and ``__transactionId__``; it is invisible on the real topic;
* :func:`write_commit` (:func:`commit_record`): commit writes a new record on the
  real topic (sysflag COMMIT, prepared-tx offset = the commit-log offset of the half
  copy the request names, the half's properties without ``REAL_TOPIC``, ``REAL_QID``,
  ``TRAN_MSG``), *then* (the service) an op record;
* :func:`write_op` (:func:`op_record`): the op record on
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 (tag ``d``, body = the closed copy's
  half-queue offset and a comma); rollback writes only the op record;
* :func:`write_renewed`: each check re-puts a renewed copy of the half on the
  half topic, with ``TRANSACTION_CHECK_TIMES`` = the checks so far
  (``putBackHalfMsgQueue``);
* :func:`write_discarded`: a half checked too often is copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` (``resolveDiscardMsg``), with no op record.

What broker_lite needs beyond RocketMQ's model rides in extra properties,
which RocketMQ ignores: an op record carries ``__transactionId__`` and
``TX_STATE`` (``COMMIT`` or ``ROLLBACK``; ``FROM_CHECK=true`` when it answered a
check-back), a renewed copy ``TX_STATE=CHECK``, and a renewed or discarded copy
of a second half under one transaction id ``TRAN_PREPARED_QUEUE_OFFSET`` (whose
copy it is, for a rebuild). The ``*_record`` functions build a record without
storing it (the service stores a batch's records in one append). The writes here
change no
:class:`~broker_lite.core.transaction_state.HalfEntry`: the service records
what each one stored.
"""

from __future__ import annotations

from broker_lite.core.delivered import delivered_view
from broker_lite.core.model import CheckRequest
from broker_lite.core.topics import HALF_TOPIC, OP_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from broker_lite.core.transaction_state import OP_NAMES, REMOVE_TAG, HalfEntry
from broker_lite.storage import (
    MessageStore,
    MessageToStore,
    PutResult,
    StoredRecord,
    SysFlag,
    TxType,
)
from broker_lite.storage.properties import (
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TRAN_MSG,
    TRAN_PREPARED_QUEUE_OFFSET,
    TRANSACTION_CHECK_TIMES,
    TRANSACTION_ID,
    TX_STATE,
    UNIQ_KEY,
)

__all__ = ["check_request", "commit_record", "half_record", "op_record", "write_commit",
           "write_discarded", "write_half", "write_op", "write_renewed"]

_DROP_ON_COMMIT = (TRAN_MSG, REAL_TOPIC, REAL_QID, TX_STATE)  # EndTransactionProcessor, + ours
# plain ints: an IntEnum operation per record costs more than the record's other tests
_TX_MASK = int(SysFlag.TX_MASK)
_COMMIT = int(TxType.COMMIT)


def half_record(msg: MessageToStore, *, producer_group: str, transaction_id: str,
                real_topic: str, real_queue_id: int) -> MessageToStore:
    """The record of ``msg`` as the half of ``transaction_id``, bound for ``real_topic``."""
    props = {**msg.properties, REAL_TOPIC: real_topic, REAL_QID: str(real_queue_id),
             PGROUP: producer_group, TRAN_MSG: "true", TRANSACTION_ID: transaction_id,
             UNIQ_KEY: transaction_id}
    return MessageToStore(
        topic=HALF_TOPIC, queue_id=0, body=msg.body, flag=msg.flag,
        sysflag=msg.sysflag & ~_TX_MASK, properties=props,
        born_timestamp=msg.born_timestamp, born_host=msg.born_host)


def write_half(store: MessageStore, msg: MessageToStore, *, producer_group: str,
               transaction_id: str, real_topic: str, real_queue_id: int) -> PutResult:
    """Store ``msg`` as the half of ``transaction_id``, bound for ``real_topic``."""
    return store.put_nowait(half_record(msg, producer_group=producer_group,
                                        transaction_id=transaction_id,
                                        real_topic=real_topic, real_queue_id=real_queue_id))


def op_record(entry: HalfEntry, state: str, copy_offset: int,
              extra: dict[str, str] | None = None) -> MessageToStore:
    """The op record closing the copy of ``entry``'s half at ``copy_offset`` as ``state``."""
    props = {TAGS: REMOVE_TAG, TRANSACTION_ID: entry.transaction_id,
             TX_STATE: OP_NAMES[state], **(extra or {})}
    return MessageToStore(topic=OP_TOPIC, body=b"%d," % entry.copies[copy_offset],
                          properties=props)


def write_op(store: MessageStore, entry: HalfEntry, state: str, copy_offset: int,
             extra: dict[str, str] | None = None) -> int:
    """The op record closing the copy of ``entry``'s half at ``copy_offset`` as ``state``.
    Returns its end offset."""
    return store.put_nowait(op_record(entry, state, copy_offset, extra)).end_offset


def commit_record(half: MessageToStore | StoredRecord, entry: HalfEntry,
                  copy_offset: int) -> MessageToStore:
    """The commit record of ``entry`` on its real topic, from ``half``, the half copy at
    ``copy_offset`` (its prepared-tx offset): as read from the log, or as it was stored."""
    props = {k: v for k, v in half.properties.items() if k not in _DROP_ON_COMMIT}
    return MessageToStore(
        topic=entry.real_topic, queue_id=entry.real_queue_id, body=half.body,
        flag=half.flag, sysflag=(half.sysflag & ~_TX_MASK) | _COMMIT,
        properties=props, born_timestamp=half.born_timestamp, born_host=half.born_host,
        reconsume_times=half.reconsume_times, prepared_tx_offset=copy_offset)


def write_commit(store: MessageStore, entry: HalfEntry, copy_offset: int) -> PutResult:
    """The commit record of ``entry`` on its real topic, from the half copy at
    ``copy_offset`` (its prepared-tx offset)."""
    return store.put_nowait(commit_record(store.get(copy_offset), entry, copy_offset))


def write_renewed(store: MessageStore, entry: HalfEntry) -> PutResult:
    """Re-put the latest copy of ``entry``'s half with its check count
    (``putBackHalfMsgQueue``)."""
    half = store.get(entry.latest_offset)
    props = dict(half.properties)
    props[TRANSACTION_CHECK_TIMES] = str(entry.check_times)
    props[TX_STATE] = "CHECK"
    if entry.resent:  # tells a rebuild whose copy this is
        props[TRAN_PREPARED_QUEUE_OFFSET] = str(entry.queue_offset)
    return store.put_nowait(MessageToStore(
        topic=HALF_TOPIC, queue_id=0, body=half.body, flag=half.flag, sysflag=half.sysflag,
        properties=props, born_timestamp=half.born_timestamp, born_host=half.born_host,
        reconsume_times=half.reconsume_times))


def write_discarded(store: MessageStore, entry: HalfEntry) -> None:
    """Copy the latest copy of ``entry``'s half to TRANS_CHECK_MAX_TIME_TOPIC
    (``resolveDiscardMsg``); no op record."""
    half = store.get(entry.latest_offset)
    props = {k: v for k, v in half.properties.items() if k != TX_STATE}
    props[TRANSACTION_CHECK_TIMES] = str(entry.check_times)
    if entry.resent:
        props[TRAN_PREPARED_QUEUE_OFFSET] = str(entry.queue_offset)
    store.put_nowait(MessageToStore(
        topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, body=half.body, flag=half.flag,
        sysflag=half.sysflag, properties=props, born_timestamp=half.born_timestamp,
        born_host=half.born_host, reconsume_times=half.reconsume_times))


def check_request(store: MessageStore, entry: HalfEntry) -> CheckRequest:
    """The check-back of ``entry`` its producer group is sent: the half as the listener
    sees it (on its real topic), and the latest copy an end may name."""
    half = store.get(entry.half_offset)
    view = delivered_view(half, topic=entry.real_topic, queue_id=entry.real_queue_id)
    return CheckRequest(
        producer_group=entry.producer_group, transaction_id=entry.transaction_id,
        msg_id=entry.transaction_id, commit_log_offset=entry.half_offset,
        queue_offset=entry.queue_offset, check_times=entry.check_times, message=view,
        renewed_commit_log_offset=entry.latest_offset,
        renewed_queue_offset=entry.copies[entry.latest_offset])
