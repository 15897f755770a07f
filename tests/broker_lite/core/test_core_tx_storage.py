"""What the transaction service leaves in the commit log: RocketMQ 5's model, record by record.

Read back with ``support.rocketmq_log``'s decoder (written from the Java
source), so the records are checked as RocketMQ's own reader sees them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_lite.core import Broker, model
from broker_lite.core.topics import HALF_TOPIC, OP_TOPIC
from broker_lite.storage import MessageToStore
from tests.broker_lite.core.core_support import ProducerEndpoint, make_broker, pull_all
from tests.support import rocketmq_log as rmq

pytestmark = pytest.mark.timeout(60)
COMMIT, ROLLBACK = model.TxState.COMMIT, model.TxState.ROLLBACK


def _half(broker: Broker, tx_id: str) -> model.SendResult:
    return broker.send("pg", model.Message(topic="Pay", body=tx_id.encode(), tags="t",
                                           msg_id=tx_id, transactional=True)).result


def _end(broker: Broker, sent: model.SendResult, state: int, *, offset: int | None = None,
         queue_offset: int | None = None) -> None:
    broker.end_transaction(model.EndRequest(
        producer_group="pg", transaction_id=sent.transaction_id, state=state,
        commit_log_offset=sent.commit_log_offset if offset is None else offset,
        queue_offset=sent.queue_offset if queue_offset is None else queue_offset,
        msg_id=sent.msg_id))


def _log(data_dir: Path) -> list[rmq.Decoded]:
    return rmq.decode_dir(data_dir / "commitlog", need_crc_prop=True)


def test_halves_ops_commits_and_renewed_copies_are_rocketmqs(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "b", tx_timeout=1, tx_check_interval=1, tx_check_max=5)
    try:
        committed, rolled, checked = (_half(broker, t) for t in ("tx-c", "tx-r", "tx-k"))
        _end(broker, committed, COMMIT)
        _end(broker, rolled, ROLLBACK)
        endpoint = ProducerEndpoint()
        broker.register(model.ClientRegistration(client_id=endpoint.client_id,
                                                 producer_groups=["pg"]), endpoint)
        entry = broker.transactions.get("tx-k")
        assert entry is not None
        for n in range(3):
            assert broker.transactions.check(entry.store_ts + 1_000 + n * 1_000) == 1
        # the producer answers the last check, naming the newest copy as RocketMQ's would
        newest = max(entry.copies)
        _end(broker, checked, COMMIT, offset=newest, queue_offset=entry.copies[newest])
    finally:
        broker.close()
    log = _log(tmp_path / "b")
    halves = [r for r in log if r.topic == HALF_TOPIC]
    assert [h.props["__transactionId__"] for h in halves] == ["tx-c", "tx-r", "tx-k"] + [
        "tx-k"] * 3
    assert all(h.sysflag & 0xC == 0 for h in halves)  # transaction bits cleared
    assert [h.queue_offset for h in halves] == list(range(6))
    assert halves[0].props["REAL_TOPIC"] == "Pay" and halves[0].props["REAL_QID"] == "0"
    assert [h.props.get("TRANSACTION_CHECK_TIMES") for h in halves[2:]] == [
        None, "1", "2", "3"]
    ops = [r for r in log if r.topic == OP_TOPIC]
    assert [(o.props["TAGS"], o.body) for o in ops] == [("d", b"0,"), ("d", b"1,"),
                                                        ("d", b"5,")]
    commits = [r for r in log if r.sysflag & 0xC == 0x8]
    assert [(c.topic, c.prepared_offset) for c in commits] == [
        ("Pay", halves[0].offset), ("Pay", halves[5].offset)]
    assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG"} & set(commits[0].props)


def test_state_is_rebuilt_from_rocketmqs_own_op_records(tmp_path: Path) -> None:
    """Op records as RocketMQ writes them (no __transactionId__, no TX_STATE, batched)."""
    broker = make_broker(tmp_path / "b")
    sent = [_half(broker, f"tx-{i}") for i in range(4)]
    broker.store.put(MessageToStore(
        topic="Pay", body=b"tx-0", sysflag=0x8, prepared_tx_offset=sent[0].commit_log_offset,
        properties={"__transactionId__": "tx-0", "UNIQ_KEY": "tx-0"}))
    broker.store.put(MessageToStore(topic=OP_TOPIC, body=b"0,2,",
                                    properties={"TAGS": "d", "UNIQ_KEY": "op-1"}))
    broker.close()
    reopened = make_broker(tmp_path / "b")
    try:
        states = {t: e.state for t in ("tx-0", "tx-1", "tx-2", "tx-3")
                  if (e := reopened.transactions.get(t)) is not None}
        assert states == {"tx-0": "committed", "tx-1": "pending", "tx-2": "rolled_back",
                          "tx-3": "pending"}
        assert reopened.transactions.pending_count == 2
    finally:
        reopened.close()


def test_a_resent_half_is_a_half_of_its_own_when_not_deduplicated(tmp_path: Path) -> None:
    """``dedupe=False`` (the gRPC door's proxy mode) stores a half re-sent under the same
    id as RocketMQ does: a second half, checked and ended on its own, also after a restart."""
    data = tmp_path / "b"
    broker = make_broker(data, tx_timeout=1, tx_check_interval=1, tx_check_max=5)
    wire = model.Message(topic="Pay", body=b"row-1", msg_id="tx-1", transactional=True)
    try:
        first = broker.send("pg", wire).result
        assert broker.send("pg", wire).result.duplicate  # the default: the first one's result
        second = broker.send("pg", wire, dedupe=False).result
        assert not second.duplicate and second.commit_log_offset != first.commit_log_offset
        assert len(broker.transactions.halves("tx-1")) == 2
        endpoint = ProducerEndpoint()
        broker.register(model.ClientRegistration(client_id=endpoint.client_id,
                                                 producer_groups=["pg"]), endpoint)
        entry = broker.transactions.get("tx-1")
        assert entry is not None
        assert broker.transactions.check(entry.store_ts + 1_500) == 2  # one per half
        assert sorted(c.commit_log_offset for c in endpoint.checks) == sorted(
            (first.commit_log_offset, second.commit_log_offset))
        _end(broker, second, ROLLBACK)  # the re-sent half, named by its offsets
    finally:
        broker.close()
    broker = make_broker(data, tx_timeout=1, tx_check_interval=1, tx_check_max=5)
    try:
        halves = broker.transactions.halves("tx-1")
        assert [(h.half_offset, h.state, h.check_times) for h in halves] == [
            (first.commit_log_offset, "pending", 1), (second.commit_log_offset, "rolled_back", 1)]
        _end(broker, first, COMMIT)
        assert [msg.body for msg in pull_all(broker, "Pay")] == [b"row-1"]
    finally:
        broker.close()
    renewed = [r for r in _log(data) if r.topic == HALF_TOPIC and "TRANSACTION_CHECK_TIMES"
               in r.props]
    assert [r.props.get("TRAN_PREPARED_QUEUE_OFFSET") for r in renewed] == [
        None, str(second.queue_offset)]
