"""The core's batch paths answer exactly as the same requests one by one.

``Broker.send_batch`` stores runs of plain messages and runs of halves in one
store append each, and ``Broker.end_transactions`` writes a round's commit
records and op records in two appends. Two brokers get the same requests:
one in batches, the other one request at a time. Their answers, the records
in their logs and the transaction state rebuilt after a restart must agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_lite.core import Broker, model
from broker_lite.errors import BrokerError
from broker_lite.storage import StoredRecord
from tests.broker_lite.core.core_support import make_broker, pull_all

pytestmark = pytest.mark.timeout(60)
COMMIT, ROLLBACK, UNKNOWN = model.TxState.COMMIT, model.TxState.ROLLBACK, model.TxState.UNKNOWN
BORN = 1_790_000_000_000


def _messages() -> list[model.Message]:
    """Plain messages, halves (one id twice), a delayed one, a reserved topic, a bad key."""
    msgs: list[model.Message] = []
    for i in range(40):
        kind = i % 8
        if kind == 3:
            msgs.append(model.Message(topic="Pay", body=b"half-%d" % i, msg_id=f"tx-{i}",
                                      transactional=True, born_timestamp=BORN, tags="h"))
        elif kind == 5:
            msgs.append(model.Message(topic="Pay", body=b"delayed", delay_level=2,
                                      msg_id=f"d-{i}", born_timestamp=BORN))
        else:
            msgs.append(model.Message(topic="Orders" if i % 2 else "Pay", body=b"m-%d" % i,
                                      msg_id=f"m-{i}", keys=[f"k{i}"], born_timestamp=BORN))
    msgs[9] = model.Message(topic="RMQ_SYS_TRANS_HALF_TOPIC", body=b"x", msg_id="sys")
    msgs[12] = model.Message(topic="Orders", body=b"x", keys=["a b"], msg_id="badkey")
    msgs[20] = model.Message(topic="Pay", body=b"again", msg_id="tx-3", transactional=True,
                             born_timestamp=BORN)  # a second half of tx-3 in the same batch
    return msgs


def _outcome(outcome: object) -> object:
    """What an answer says. Log offsets are left out of an end's: a batch writes its commit
    records before its op records, so they sit elsewhere in the log (queue offsets agree)."""
    if isinstance(outcome, BrokerError):
        return type(outcome).__name__, outcome.code
    if isinstance(outcome, model.Ended):
        r = outcome.response
        return r.outcome, r.already, r.queue_id, r.queue_offset, outcome.end_offset > 0
    return outcome


def _records(broker: Broker) -> list[tuple[str, int, int, int, bytes, dict[str, str]]]:
    out: list[tuple[str, int, int, int, bytes, dict[str, str]]] = []
    for record in broker.store.scan():
        assert isinstance(record, StoredRecord)
        props = {k: v for k, v in record.properties.items() if k != "DELAY_DELIVER_AT"}
        out.append((record.topic, record.queue_id, record.queue_offset, record.sysflag,
                    record.body, props))
    return out


def test_send_batch_answers_and_stores_as_sends_one_by_one(tmp_path: Path) -> None:
    batched = make_broker(tmp_path / "batched")
    single = make_broker(tmp_path / "single")
    try:
        msgs = _messages()
        got = batched.send_batch("pg", msgs, born_host="127.0.0.1:5555")
        want: list[object] = []
        for msg in msgs:
            try:
                want.append(single.send("pg", msg, born_host="127.0.0.1:5555"))
            except BrokerError as exc:
                want.append(exc)
        assert [_outcome(o) for o in got] == [_outcome(o) for o in want]
        assert sum(isinstance(o, BrokerError) for o in got) == 2
        [duplicate] = [o for o in got if isinstance(o, model.Sent) and o.result.duplicate]
        assert duplicate.result.transaction_id == "tx-3" and duplicate.end_offset == 0
        assert _records(batched) == _records(single)
        assert [m.msg_id for m in pull_all(batched, "Orders")] == \
            [m.msg_id for m in pull_all(single, "Orders")]
        assert batched.transactions.pending_count == single.transactions.pending_count == 5
    finally:
        batched.close()
        single.close()


def _ends(halves: list[model.SendResult]) -> list[model.EndRequest]:
    """Commits, rollbacks, unknowns, a half ended twice in one batch (same way, then the
    other way), an unknown id, a wrong group, a wrong offset, a bad state."""
    def req(sent: model.SendResult, state: int, **kw: object) -> model.EndRequest:
        fields: dict[str, object] = dict(
            producer_group="pg", transaction_id=sent.transaction_id, state=state,
            commit_log_offset=sent.commit_log_offset, queue_offset=sent.queue_offset,
            msg_id=sent.msg_id)
        fields.update(kw)
        return model.EndRequest(**fields)  # type: ignore[arg-type]

    ends = [req(s, (COMMIT, ROLLBACK, UNKNOWN)[i % 3]) for i, s in enumerate(halves[:12])]
    ends += [req(halves[0], COMMIT), req(halves[1], COMMIT),  # again: already / conflict
             req(halves[12], COMMIT), req(halves[12], COMMIT), req(halves[12], ROLLBACK),
             req(halves[13], ROLLBACK), req(halves[13], COMMIT),
             req(halves[14], COMMIT, transaction_id="nope"),
             req(halves[14], COMMIT, producer_group="other"),
             req(halves[14], COMMIT, commit_log_offset=halves[14].commit_log_offset + 1),
             req(halves[14], 5), req(halves[14], COMMIT, from_check=True),
             req(halves[2], COMMIT)]  # an UNKNOWN of this batch, committed later in it
    return ends


def test_end_transactions_answers_and_stores_as_ends_one_by_one(tmp_path: Path) -> None:
    brokers = [make_broker(tmp_path / "batched"), make_broker(tmp_path / "single")]
    try:
        halves: list[list[model.SendResult]] = []
        for broker in brokers:
            sent = broker.send_batch("pg", [
                model.Message(topic="Pay", body=b"b%d" % i, msg_id=f"tx-{i}",
                              transactional=True, born_timestamp=BORN) for i in range(16)])
            halves.append([s.result for s in sent if isinstance(s, model.Sent)])
        assert halves[0] == halves[1]
        before = brokers[0].end_transaction(_ends(halves[0])[0])  # ended before the batch
        assert before == brokers[1].end_transaction(_ends(halves[1])[0])
        got = brokers[0].end_transactions(_ends(halves[0]))
        want: list[object] = []
        for request in _ends(halves[1]):
            try:
                want.append(brokers[1].end_transaction(request))
            except BrokerError as exc:
                want.append(exc)
        assert [_outcome(o) for o in got] == [_outcome(o) for o in want]
        for ended in got:  # an answer waits for the records it wrote to be durable
            if isinstance(ended, model.Ended) and ended.response.commit_log_offset >= 0 \
                    and not ended.response.already:
                commit = brokers[0].store.get(ended.response.commit_log_offset)
                assert ended.end_offset >= commit.end_offset
        kinds = [type(o).__name__ for o in got if isinstance(o, BrokerError)]
        assert sorted(kinds) == ["TransactionConflictError", "TransactionConflictError",
                                 "TransactionConflictError", "TransactionMismatchError",
                                 "TransactionMismatchError", "TransactionMismatchError",
                                 "TransactionNotFoundError"]
        assert [r for r in _records(brokers[0]) if r[0] != "Pay"] == \
            [r for r in _records(brokers[1]) if r[0] != "Pay"]  # the op records, in order
        assert sorted(_records(brokers[0])) == sorted(_records(brokers[1]))
        assert sorted(m.body for m in pull_all(brokers[0], "Pay")) == \
            sorted(m.body for m in pull_all(brokers[1], "Pay"))
        pending = [brokers[0].transactions.pending_count, brokers[1].transactions.pending_count]
        assert pending[0] == pending[1] > 0
    finally:
        for broker in brokers:
            broker.close()
    reopened = [make_broker(tmp_path / "batched"), make_broker(tmp_path / "single")]
    try:
        states = [{e.transaction_id: e.state for e in b.transactions.pending(100)}
                  for b in reopened]
        assert states[0] == states[1] and len(states[0]) == pending[0]
        for i in range(16):
            a, b = (r.transactions.get(f"tx-{i}") for r in reopened)
            assert a is not None and b is not None and a.state == b.state
    finally:
        for broker in reopened:
            broker.close()


def test_a_commit_record_is_the_same_from_memory_or_read_back(tmp_path: Path) -> None:
    """The service builds a commit record from the half it just stored; after a restart it
    reads the half back. Both must write the same record."""
    def halves(broker: Broker) -> list[model.SendResult]:
        msgs = [model.Message(topic="Pay", body=b"body-%d" % i, msg_id=f"tx-{i}", flag=i,
                              tags="t", keys=[f"k{i}", "shared"], born_timestamp=BORN * (i % 2),
                              properties={"user": f"v{i}", "__CRC32#": "1234567890",
                                          "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"},
                              transactional=True) for i in range(8)]
        sent = broker.send_batch("pg", msgs, born_host="[::1]:7000" if msgs else "")
        return [s.result for s in sent if isinstance(s, model.Sent)]

    def commit_all(broker: Broker, sent: list[model.SendResult]) -> list[tuple[object, ...]]:
        ended = broker.end_transactions([model.EndRequest(
            producer_group="pg", transaction_id=s.transaction_id, state=COMMIT,
            commit_log_offset=s.commit_log_offset) for s in sent])
        assert all(isinstance(e, model.Ended) for e in ended)
        return [what(broker.store.get(e.response.commit_log_offset),
                     broker.store.get(s.commit_log_offset))
                for s, e in zip(sent, ended, strict=True) if isinstance(e, model.Ended)]

    def what(record: StoredRecord, half: StoredRecord) -> tuple[object, ...]:
        assert "__CRC32#" not in record.properties and record.properties["user"]
        return (record.topic, record.queue_id, record.queue_offset, record.flag, record.sysflag,
                record.body, record.properties, record.born_host, record.prepared_tx_offset,
                "the half's store time" if record.born_timestamp == half.store_timestamp
                else record.born_timestamp)

    warm = make_broker(tmp_path / "warm")
    try:
        from_memory = commit_all(warm, halves(warm))
    finally:
        warm.close()
    cold = make_broker(tmp_path / "cold")
    sent = halves(cold)
    cold.close()
    cold = make_broker(tmp_path / "cold")
    try:
        read_back = commit_all(cold, sent)
    finally:
        cold.close()

    assert from_memory == read_back
    assert [w[-1] for w in read_back] == ["the half's store time", BORN] * 4
