"""The transaction service on a real store: RocketMQ's semantics and its fixed defects.

Time is passed explicitly (``check(now_ms)``), so every age is exact and no
test sleeps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_lite.core import Broker, model
from broker_lite.core.topics import HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC
from broker_lite.errors import (
    NoPermissionError,
    TransactionConflictError,
    TransactionMismatchError,
    TransactionNotFoundError,
)
from broker_lite.storage import TxType
from tests.broker_lite.core.core_support import Opener, ProducerEndpoint, make_broker, pull_all

pytestmark = pytest.mark.timeout(60)
COMMIT, ROLLBACK, UNKNOWN = model.TxState.COMMIT, model.TxState.ROLLBACK, model.TxState.UNKNOWN


def half(broker: Broker, tx_id: str, *, topic: str = "Pay", group: str = "pg",
         props: dict[str, str] | None = None, born: int = 0) -> model.SendResult:
    return broker.send(group, model.Message(topic=topic, body=f"body-{tx_id}".encode(),
                                            tags="t", keys=[f"order-{tx_id}"],
                                            properties=props or {}, msg_id=tx_id,
                                            born_timestamp=born, transactional=True)).result


def end(broker: Broker, sent: model.SendResult, state: int, *, group: str = "pg",
        from_check: bool = False) -> model.EndResult:
    return broker.end_transaction(model.EndRequest(
        producer_group=group, transaction_id=sent.transaction_id, state=state,
        commit_log_offset=sent.commit_log_offset, queue_offset=sent.queue_offset,
        msg_id=sent.msg_id, from_check=from_check)).response


def test_half_is_invisible_until_commit_then_visible_once(open_broker: Opener) -> None:
    broker = open_broker()
    sent = half(broker, "tx-1")
    assert sent.topic == "Pay" and sent.transaction_id == "tx-1"
    assert pull_all(broker, "Pay") == []
    response = end(broker, sent, COMMIT)
    assert response.outcome == "committed" and not response.already
    [message] = pull_all(broker, "Pay")
    assert message.body == b"body-tx-1" and message.msg_id == "tx-1"
    assert message.tags == "t" and message.keys == ["order-tx-1"]
    assert "TRAN_MSG" not in message.properties and "REAL_TOPIC" not in message.properties
    record = broker.store.get(message.commit_log_offset)
    assert record.tx_type == TxType.COMMIT
    assert record.prepared_tx_offset == sent.commit_log_offset


def test_rolled_back_half_is_never_visible(open_broker: Opener) -> None:
    broker = open_broker()
    sent = half(broker, "tx-r")
    assert end(broker, sent, ROLLBACK).outcome == "rolled_back"
    assert pull_all(broker, "Pay") == []


def test_end_transaction_is_idempotent(open_broker: Opener) -> None:
    """RocketMQ #5574: a second commit writes the message twice. Ours does not."""
    broker = open_broker()
    sent = half(broker, "tx-2")
    end(broker, sent, COMMIT)
    again = end(broker, sent, COMMIT)
    assert again.already and again.outcome == "committed"
    assert len(pull_all(broker, "Pay")) == 1


def test_first_resolution_wins(open_broker: Opener) -> None:
    """RocketMQ #2694/#8158: a late conflicting resolution lands. Ours is refused."""
    broker = open_broker()
    committed, rolled = half(broker, "tx-c"), half(broker, "tx-r")
    end(broker, committed, COMMIT)
    end(broker, rolled, ROLLBACK)
    with pytest.raises(TransactionConflictError, match="already committed"):
        end(broker, committed, ROLLBACK, from_check=True)
    with pytest.raises(TransactionConflictError, match="already rolled back"):
        end(broker, rolled, COMMIT)
    assert [msg.msg_id for msg in pull_all(broker, "Pay")] == ["tx-c"]


def test_second_half_with_same_id_is_the_first(open_broker: Opener) -> None:
    broker = open_broker()
    first, second = half(broker, "tx-d"), half(broker, "tx-d")
    assert second.duplicate and second.commit_log_offset == first.commit_log_offset
    assert broker.store.queue_offsets(HALF_TOPIC, 0) == (0, 1)
    end(broker, second, COMMIT)
    assert len(pull_all(broker, "Pay")) == 1


def test_end_transaction_validation(open_broker: Opener) -> None:
    broker = open_broker()
    sent = half(broker, "tx-v")
    with pytest.raises(TransactionNotFoundError, match="find prepared transaction"):
        broker.end_transaction(model.EndRequest(producer_group="pg",
                                                       transaction_id="nope", state=COMMIT))
    with pytest.raises(TransactionMismatchError, match="producer group"):
        end(broker, sent, COMMIT, group="other")
    for field in ("commit_log_offset", "queue_offset"):
        bad = model.EndRequest(producer_group="pg", transaction_id="tx-v", state=COMMIT,
                                      **{field: getattr(sent, field) + 1})
        with pytest.raises(TransactionMismatchError, match=field.replace("_", "[- ]")):
            broker.end_transaction(bad)
    with pytest.raises(TransactionMismatchError, match="state 5"):
        end(broker, sent, 5)
    assert pull_all(broker, "Pay") == []  # nothing changed
    assert end(broker, sent, COMMIT).outcome == "committed"


def test_reject_transactions(open_broker: Opener) -> None:
    broker = open_broker(reject_transactions=True)
    with pytest.raises(NoPermissionError, match="rejects transactional"):
        half(broker, "tx-x")


def _producer(broker: Broker, group: str = "pg") -> ProducerEndpoint:
    endpoint = ProducerEndpoint()
    broker.register(model.ClientRegistration(client_id=endpoint.client_id,
                                             producer_groups=[group]), endpoint)
    return endpoint


def test_check_waits_for_timeout_by_store_time_and_counts_only_delivered_checks(
    open_broker: Opener,
) -> None:
    broker = open_broker(tx_timeout=6, tx_check_interval=30, tx_check_max=3)
    # born 10 minutes "ago" by a skewed producer clock: age still counts from store time
    sent = half(broker, "tx-k", born=1)
    stored = broker.transactions.get("tx-k")
    assert stored is not None
    t0 = stored.store_ts
    assert broker.transactions.check(t0 + 5_999) == 0  # RocketMQ #9640: not early
    assert broker.transactions.check(t0 + 7_000) == 0  # nobody online (#1694)...
    assert stored.check_times == 0  # ...and not counted
    endpoint = _producer(broker)
    assert broker.transactions.check(t0 + 8_000) == 1
    assert [c.transaction_id for c in endpoint.checks] == ["tx-k"]
    check = endpoint.checks[0]
    assert check.message.topic == "Pay" and check.message.body == b"body-tx-k"
    assert check.commit_log_offset == sent.commit_log_offset and check.check_times == 1
    assert broker.transactions.check(t0 + 8_000 + 29_000) == 0  # once per interval
    assert broker.transactions.check(t0 + 8_000 + 30_000) == 1
    # the producer answers through end-transaction, as a real one does
    end(broker, sent, COMMIT, from_check=True)
    assert broker.transactions.check(t0 + 200_000) == 0
    assert len(pull_all(broker, "Pay")) == 1


def test_immunity_delays_the_first_check_without_spending_counts(open_broker: Opener) -> None:
    """RocketMQ #8311: immunity re-puts used up check counts. Ours only waits."""
    broker = open_broker(tx_timeout=1, tx_check_interval=1, tx_check_max=2)
    half(broker, "tx-i", props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    endpoint = _producer(broker)
    entry = broker.transactions.get("tx-i")
    assert entry is not None
    for second in range(2, 60):
        broker.transactions.check(entry.store_ts + second * 1000)
    assert entry.check_times == 0 and endpoint.checks == []
    assert broker.transactions.check(entry.store_ts + 60_000) == 1
    assert entry.state == "pending"


def test_unresolved_half_is_discarded_after_check_max(open_broker: Opener) -> None:
    broker = open_broker(tx_timeout=6, tx_check_interval=30, tx_check_max=3)
    half(broker, "tx-u")
    endpoint = _producer(broker)
    entry = broker.transactions.get("tx-u")
    assert entry is not None
    t0 = entry.store_ts
    checks_at = [t0 + 6_000, t0 + 36_000, t0 + 66_000]
    for now in checks_at:
        assert broker.transactions.check(now) == 1
    assert len(endpoint.checks) == 3
    # bound of DESIGN §1.3: tx_timeout + interval * check_max = 96 s
    assert broker.transactions.check(t0 + 95_999) == 0 and entry.state == "pending"
    broker.transactions.check(t0 + 96_000)
    assert entry.state == "discarded"
    [discarded] = pull_all(broker, TRANS_CHECK_MAX_TIME_TOPIC)
    assert discarded.properties["REAL_TOPIC"] == "Pay"
    assert discarded.properties["TRANSACTION_CHECK_TIMES"] == "3"
    assert pull_all(broker, "Pay") == []
    with pytest.raises(TransactionConflictError, match="discarded"):
        end(broker, model.SendResult(msg_id="tx-u", topic="Pay", queue_id=0, queue_offset=-1,
                                 commit_log_offset=-1, transaction_id="tx-u"), COMMIT)


def test_state_and_check_counts_survive_a_restart(tmp_path: Path) -> None:
    """RocketMQ #2117/#4436: resolved halves are checked again after a restart. Ours not."""
    broker = make_broker(tmp_path / "b", tx_timeout=1, tx_check_interval=10, tx_check_max=5)
    done = [half(broker, f"done-{i}") for i in range(5)]
    for i, sent in enumerate(done):
        end(broker, sent, COMMIT if i % 2 == 0 else ROLLBACK)
    half(broker, "open")
    _producer(broker)
    entry = broker.transactions.get("open")
    assert entry is not None
    t0 = entry.store_ts
    assert broker.transactions.check(t0 + 2_000) == 1
    broker.close()

    reopened = make_broker(tmp_path / "b", tx_timeout=1, tx_check_interval=10, tx_check_max=5)
    try:
        endpoint = _producer(reopened)
        assert reopened.transactions.pending_count == 1
        again = reopened.transactions.get("open")
        assert again is not None and again.check_times == 1
        assert reopened.transactions.check(t0 + 2_000 + 10_000) == 1
        assert [c.transaction_id for c in endpoint.checks] == ["open"]
        assert sorted(msg.msg_id for msg in pull_all(reopened, "Pay")) == [
            "done-0", "done-2", "done-4"]
        with pytest.raises(TransactionConflictError):
            end(reopened, done[1], COMMIT)
    finally:
        reopened.close()
