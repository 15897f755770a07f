"""kill -9 the broker under load, restart it on the same data, check what survives.

* no acknowledged message is lost;
* a consumer group resumes from its saved offsets (nothing it had consumed
  before the last offset save comes back);
* no half that was resolved before the crash is checked again;
* halves still pending are checked back after the restart, and commit.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from broker_lite.client import (
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    TransactionProducer,
)
from broker_lite.errors import BrokerError
from tests.support import start_broker_lite, wait_until
from tests.support.recorder import Recorder

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
TX_ARGS = ("--tx-timeout", "1", "--tx-check-interval", "0.3", "--tx-check-max", "50")


class CheckRecorder:
    """Answers checks: COMMIT once the test allows it, UNKNOWN before."""

    def __init__(self) -> None:
        self.checked: list[str] = []
        self.allow_commit = threading.Event()
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return arg  # type: ignore[no-any-return]

    def check_local_transaction(self, msg: ReceivedMessage) -> LocalTransactionState:
        with self._lock:
            self.checked.append(msg.transaction_id or "")
        if self.allow_commit.is_set():
            return LocalTransactionState.COMMIT_MESSAGE
        return LocalTransactionState.UNKNOW


def _saved_offsets(data_dir: Path, group: str) -> dict[str, int]:
    try:
        raw = json.loads((data_dir / "offsets.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {k: v for k, v in raw.items() if k.startswith(group + "@")}


def _all_ids(server: str, topic: str) -> list[str]:
    ids: list[str] = []
    with PullConsumer("restart-audit", server) as puller:
        for queue_id in range(4):
            offset = 0
            while True:
                result = puller.pull(topic, queue_id, offset, 256)
                ids.extend(m.msg_id for m in result.messages)
                if result.next_offset == offset:
                    break
                offset = result.next_offset
    return ids


def test_kill_nine_under_load_then_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    acked: list[str] = []
    first_batch: set[str] = set()
    checks = CheckRecorder()
    with start_broker_lite(data_dir, TX_ARGS) as broker:
        server = broker.native
        with Producer("load", server) as producer:
            for n in range(200):
                acked.append(producer.send(Message("Load", f"early-{n}".encode())).msg_id)
        # a group consumes the first 200 and has its offsets saved
        consumed = Recorder()
        consumer = PushConsumer("resumers", server, listener=consumed, long_poll_ms=1000)
        consumer.subscribe("Load")
        with consumer:
            wait_until(lambda: len(consumed.msg_ids()) >= 200, timeout=30,
                       message="first batch consumed")
            wait_until(lambda: sum(_saved_offsets(data_dir, "resumers").values()) >= 200,
                       timeout=30, message="offsets saved")
        first_batch = set(acked)

        tx = TransactionProducer("restart-tx", checks, server)
        tx.start()
        resolved = {
            tx.send_message_in_transaction(Message("Pay", f"r-{n}".encode()), state)
            .transaction_id
            for n, state in enumerate([LocalTransactionState.COMMIT_MESSAGE,
                                       LocalTransactionState.ROLLBACK_MESSAGE] * 10)
        }
        pending = {
            tx.send_message_in_transaction(Message("Pay", f"p-{n}".encode()),
                                           LocalTransactionState.UNKNOW).transaction_id
            for n in range(10)
        }
        # load while the broker dies
        stop = threading.Event()

        def load() -> None:
            with Producer("load-2", server, timeout=2.0) as p:
                n = 0
                while not stop.is_set():
                    try:
                        acked.append(p.send(Message("Load", f"late-{n}".encode())).msg_id)
                    except BrokerError:
                        return
                    n += 1

        loader = threading.Thread(target=load)
        loader.start()
        wait_until(lambda: len(acked) >= 700, timeout=30, message="load running")
        broker.kill()
        stop.set()
        loader.join(timeout=30)
        tx.shutdown()

    checks.checked.clear()
    checks.allow_commit.set()
    with start_broker_lite(data_dir, TX_ARGS) as broker:
        server = broker.native
        stored = set(_all_ids(server, "Load"))
        lost = [msg_id for msg_id in acked if msg_id not in stored]
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {lost[:3]}"

        again = Recorder()
        resumer = PushConsumer("resumers", server, listener=again, long_poll_ms=1000)
        resumer.subscribe("Load")
        with resumer:
            late = set(acked) - first_batch
            wait_until(lambda: again.msg_ids() >= late, timeout=60,
                       message="late messages consumed")
        assert not again.msg_ids() & first_batch, \
            "messages consumed before the saved offsets came back"

        tx = TransactionProducer("restart-tx", checks, server)
        tx.start()
        try:
            wait_until(lambda: set(checks.checked) >= pending, timeout=30,
                       message="pending halves checked after restart")
            assert not set(checks.checked) & resolved, "a resolved half was checked again"
            visible = wait_until(lambda: _pay_committed(server, pending), timeout=30,
                                 message="check-back commits reach the topic")
            assert visible
        finally:
            tx.shutdown()


def _pay_committed(server: str, pending: set[str]) -> bool:
    return pending <= set(_all_ids(server, "Pay"))
