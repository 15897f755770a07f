"""RocketMQ's transactional-message scenario, end to end, over loopback.

A real ``broker-lite serve`` process, the real client. 120 transactions are
split five ways: commit now, roll back now, commit on check-back, roll back on
check-back, and "unknown" forever until the broker discards them after
``tx_check_max`` checks. A consumer group must receive exactly the committed
ones, each once, and nothing else; the discarded ones must sit in
``TRANS_CHECK_MAX_TIME_TOPIC``; and the commit log must hold exactly one commit
record per committed transaction.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from typing import Any

import pytest

from broker_lite.client import (
    LocalTransactionState,
    Message,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    TransactionProducer,
)
from tests.support import BrokerLiteServer, wait_until
from tests.support.recorder import Recorder

pytestmark = pytest.mark.timeout(120)

KINDS = ("commit", "rollback", "check_commit", "check_rollback", "unknown")
TX_ARGS = ("--tx-timeout", "1", "--tx-check-interval", "0.3", "--tx-check-max", "3")


class ScenarioListener:
    """The local transaction says what the order's kind says; so does the check."""

    def __init__(self) -> None:
        self.checked: Counter[str] = Counter()
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return {"commit": LocalTransactionState.COMMIT_MESSAGE,
                "rollback": LocalTransactionState.ROLLBACK_MESSAGE}.get(
                    arg, LocalTransactionState.UNKNOW)

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        kind = msg.properties["kind"]
        with self._lock:
            self.checked[kind] += 1
        return {"check_commit": LocalTransactionState.COMMIT_MESSAGE,
                "check_rollback": LocalTransactionState.ROLLBACK_MESSAGE}.get(
                    kind, LocalTransactionState.UNKNOWN)


@pytest.mark.parametrize("broker_lite_server", [TX_ARGS], indirect=True)
def test_120_transactions_five_ways(broker_lite_server: BrokerLiteServer) -> None:
    server = broker_lite_server.native
    received = Recorder()
    listener = ScenarioListener()
    expected: dict[str, set[str]] = {kind: set() for kind in KINDS}
    consumer = PushConsumer("scenario-consumers", server, listener=received, long_poll_ms=2000,
                            rebalance_interval=1.0)
    consumer.subscribe("Orders")
    consumer.start()
    producer = TransactionProducer("scenario-producers", listener, server,
                                   check_threads=(1, 4))
    producer.start()
    try:
        for n in range(120):
            kind = KINDS[n % 5]
            result = producer.send_message_in_transaction(
                Message("Orders", f"order-{n}".encode(), tags=kind, keys=f"order-{n}",
                        properties={"kind": kind}),
                kind)
            expected[kind].add(result.transaction_id)
        committed = expected["commit"] | expected["check_commit"]

        def received_ids() -> Counter[str]:
            return Counter(m.transaction_id or "" for m in received.messages())

        wait_until(lambda: set(received_ids()) >= committed, timeout=60,
                   message="every committed transaction consumed")
        discarded = _wait_for_discards(server, len(expected["unknown"]))
        assert discarded == expected["unknown"]
        # every check-resolved kind was asked, the unknown ones at most tx_check_max times
        assert listener.checked["check_commit"] >= 24
        assert listener.checked["check_rollback"] >= 24
        assert 24 <= listener.checked["unknown"] <= 24 * 3
        assert listener.checked["commit"] == listener.checked["rollback"] == 0
    finally:
        producer.shutdown()
        consumer.shutdown()

    counts = received_ids()
    assert set(counts) == committed, "exactly the committed set, nothing else"
    assert all(c == 1 for c in counts.values()), f"duplicates: {counts.most_common(3)}"
    commits = _commit_records(broker_lite_server)
    assert Counter(commits) == Counter({tx: 1 for tx in committed})


def _wait_for_discards(server: str, count: int) -> set[str]:
    found: dict[int, str] = {}
    with PullConsumer("scenario-audit", server) as puller:
        def poll() -> bool:
            offset = max(found, default=-1) + 1
            result = puller.pull("TRANS_CHECK_MAX_TIME_TOPIC", 0, offset, 64)
            for msg in result.messages:
                found[msg.queue_offset] = msg.transaction_id or ""
            return len(found) >= count

        wait_until(poll, timeout=60, message=f"{count} halves discarded")
    return set(found.values())


def _commit_records(server: BrokerLiteServer) -> list[str]:
    """Transaction ids of every commit record in the log (``broker-lite inspect``)."""
    out = subprocess.run([sys.executable, "-m", "broker_lite", "inspect", "--data-dir",
                          str(server.data_dir)], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    return [r["transaction_id"] for r in rows if r["sysflag"] == "commit"]
