"""The operations requests (the console's) against a real broker.

Consumer groups with their offsets and clients, broker stats, pending halves
with their check schedule, browsing a queue without a group, resending a dead
letter to its group, the FROM_CHECK mark of a check-back's resolution, and
the ACL: only admin accounts may ask.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from broker_lite.client import (
    Admin,
    ConsumeResult,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    TransactionProducer,
)
from broker_lite.core.transactions import FROM_CHECK
from broker_lite.errors import MessageNotFoundError, NoPermissionError
from tests.broker_lite.client.client_support import StartBroker
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.timeout(60)

UNKNOW = LocalTransactionState.UNKNOW
COMMIT = LocalTransactionState.COMMIT_MESSAGE


class _Check:
    """Leaves the local transaction UNKNOW; answers check-backs with ``answer``."""

    def __init__(self, answer: LocalTransactionState) -> None:
        self.answer = answer
        self.checks = 0

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return UNKNOW

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        self.checks += 1
        return self.answer


def test_consumer_groups_show_offsets_lag_and_clients(broker: BrokerLiteServer) -> None:
    with Admin(broker.native) as admin, Producer("pg", broker.native) as producer:
        admin.create_topic("Orders", 2)
        for n in range(6):
            producer.send(Message("Orders", f"order {n}"))
        seen: list[str] = []
        lock = threading.Lock()

        def handle(message: ReceivedMessage) -> ConsumeResult:
            with lock:
                seen.append(message.msg_id)
            return ConsumeResult.SUCCESS

        consumer = PushConsumer("billing", broker.native, listener=handle)
        consumer.subscribe("Orders")
        consumer.start()
        try:
            def caught_up() -> bool:
                offsets = [o for o in admin.consumer_groups().offsets
                           if o.group == "billing" and o.topic == "Orders"]
                return len(offsets) == 2 and all(o.committed == o.max_offset for o in offsets)

            wait_until(caught_up, timeout=20, message=lambda: str(admin.consumer_groups()))
            groups = admin.consumer_groups()
            assert sum(o.max_offset for o in groups.offsets
                       if o.group == "billing" and o.topic == "Orders") == 6
            [client] = [c for c in groups.clients
                        if any(s.group == "billing" for s in c.subscriptions)]
            assert client.remote_address.startswith("127.0.0.1:")
            assert {s.topic for s in client.subscriptions} == {"Orders", "%RETRY%billing"}
        finally:
            consumer.shutdown()
        stats = admin.broker_stats()
        assert stats.disk_bytes > 0 and stats.max_offset > stats.min_offset >= 0
        assert stats.pending_transactions == 0


def test_pending_halves_show_their_check_schedule_and_a_check_back_answer_is_marked(
        broker: BrokerLiteServer) -> None:
    listener = _Check(UNKNOW)
    with Admin(broker.native) as admin, \
            TransactionProducer("txg", listener, broker.native) as producer:
        sent = producer.send_message_in_transaction(Message("Pay", "later"), None)
        [half] = admin.pending_transactions().halves
        assert half.transaction_id == sent.transaction_id and half.producer_group == "txg"
        assert half.real_topic == "Pay" and half.check_times == 0
        assert half.next_check_ms == half.store_timestamp + 1000  # --tx-timeout 1
        assert admin.broker_stats().pending_transactions == 1
        wait_until(lambda: admin.pending_transactions().halves[0].check_times >= 2,
                   timeout=20)
        checked = admin.pending_transactions().halves[0]
        assert checked.next_check_ms == checked.last_check_ms + 500  # --tx-check-interval
        listener.answer = COMMIT
        wait_until(lambda: admin.pending_transactions().pending == 0, timeout=20)
        records = admin.query_by_key(sent.transaction_id, 64)
        ops = [r for r in records if r.delivered_topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC"]
        resolutions = [r for r in ops if r.properties.get("TX_STATE") == "COMMIT"]
        assert [r.properties.get(FROM_CHECK) for r in resolutions] == ["true"]
        renewed = [r for r in records if r.delivered_topic == "RMQ_SYS_TRANS_HALF_TOPIC"
                   and r.properties.get("TX_STATE") == "CHECK"]  # one half copy per check
        assert len(renewed) >= 3


def test_a_dead_letter_browsed_and_resent_reaches_its_group(broker: BrokerLiteServer) -> None:
    accept = threading.Event()
    delivered: list[tuple[str, int, bool]] = []

    def handle(message: ReceivedMessage) -> ConsumeResult:
        ok = accept.is_set()
        delivered.append((message.msg_id, message.reconsume_times, ok))
        return ConsumeResult.SUCCESS if ok else ConsumeResult.RECONSUME_LATER

    with Admin(broker.native) as admin, Producer("pg", broker.native) as producer:
        admin.create_topic("Ship", 1)
        sent = producer.send(Message("Ship", "fragile", keys=["box-1"]))
        consumer = PushConsumer("shipping", broker.native, listener=handle,
                                max_reconsume_times=0)
        consumer.subscribe("Ship")
        consumer.start()
        try:
            wait_until(lambda: admin.browse("%DLQ%shipping").messages, timeout=20,
                       message=lambda: str(delivered))
            [dead] = admin.browse("%DLQ%shipping", 0, -1, 10).messages
            assert dead.msg_id == sent.msg_id and dead.body == b"fragile"
            assert dead.properties["RETRY_TOPIC"] == "Ship"
            assert admin.browse("%DLQ%shipping", 0, 0, 10).messages == [dead]
            with pytest.raises(MessageNotFoundError):
                admin.resend("%DLQ%shipping", 0, dead.queue_offset, "not-its-id", "shipping")
            accept.set()
            result = admin.resend("%DLQ%shipping", 0, dead.queue_offset, dead.msg_id,
                                  "shipping")
            assert result.topic == "%RETRY%shipping"
            wait_until(lambda: (sent.msg_id, 0, True) in delivered, timeout=20,
                       message=lambda: str(delivered))
        finally:
            consumer.shutdown()
        assert admin.browse("NoSuchTopic").messages == []


def test_only_admin_accounts_may_ask(start_broker: StartBroker, tmp_path: Path) -> None:
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps({"accounts": [
        {"access_key": "ops", "secret_key": "ops-secret", "admin": True},
        {"access_key": "app", "secret_key": "app-secret", "topic_perms": {"Orders": "PUB|SUB"}},
    ]}))
    with start_broker("--acl", str(acl)) as broker:
        with Admin(broker.native, access_key="ops", secret_key="ops-secret") as admin:
            assert admin.consumer_groups().offsets == []
            assert admin.broker_stats().disk_bytes > 0
        with Admin(broker.native, access_key="app", secret_key="app-secret") as app:
            for ask in (app.consumer_groups, app.broker_stats, app.pending_transactions,
                        lambda: app.browse("Orders"),
                        lambda: app.resend("Orders", 0, 0, "x", "g")):
                with pytest.raises(NoPermissionError, match="admin"):
                    ask()
