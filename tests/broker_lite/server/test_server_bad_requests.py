"""Requests that are well framed but wrong: each gets its own error code, nothing is
stored, and a concurrent healthy client is served throughout."""

from __future__ import annotations

import pytest

from broker_lite.protocol import RequestCode, ResponseCode
from broker_lite.protocol import messages as m
from tests.broker_lite.server.server_wire import HealthyClient, WireClient
from tests.support import BrokerLiteServer, wait_until

pytestmark = pytest.mark.timeout(60)


def _end(tx: m.SendResult, **changes: object) -> m.EndTransactionRequest:
    fields: dict[str, object] = dict(
        producer_group="pg", transaction_id=tx.transaction_id, state=m.TxState.COMMIT,
        commit_log_offset=tx.commit_log_offset, queue_offset=tx.queue_offset,
        msg_id=tx.msg_id)
    fields.update(changes)
    return m.EndTransactionRequest(**fields)  # type: ignore[arg-type]


def test_each_bad_request_gets_its_code_and_changes_nothing(
    broker: BrokerLiteServer, healthy: HealthyClient
) -> None:
    with WireClient(broker.native) as client:
        good = client.send("Orders", b"kept", queue_id=0)
        tx = client.send("Orders", b"half", transactional=True, msg_id="tx-1")
        before = healthy.answers
        cases: list[tuple[RequestCode, object, ResponseCode, str]] = [
            (RequestCode.SEND_MESSAGE,
             m.SendRequest(producer_group="pg", message=m.WireMessage(topic="bad topic!",
                                                                      body=b"x")),
             ResponseCode.INVALID_TOPIC, "topic"),
            (RequestCode.SEND_MESSAGE,
             m.SendRequest(producer_group="pg", message=m.WireMessage(
                 topic="Orders", body=b"x" * (4 * 1024 * 1024 + 1))),
             ResponseCode.MESSAGE_TOO_LARGE, "over the limit"),
            (RequestCode.END_TRANSACTION, _end(tx, transaction_id="no-such-tx"),
             ResponseCode.TRANSACTION_NOT_FOUND, "find prepared transaction"),
            (RequestCode.END_TRANSACTION, _end(tx, producer_group="someone-else"),
             ResponseCode.TRANSACTION_MISMATCH, "producer group"),
            (RequestCode.END_TRANSACTION, _end(tx, commit_log_offset=good.commit_log_offset),
             ResponseCode.TRANSACTION_MISMATCH, "commit-log offset"),
            (RequestCode.END_TRANSACTION, _end(tx, queue_offset=tx.queue_offset + 9),
             ResponseCode.TRANSACTION_MISMATCH, "half-queue offset"),
            (RequestCode.ACK_MESSAGE,
             m.AckRequest(group="g", topic="Orders", queue_id=0, queue_offset=0,
                          msg_id="not-this-one"),
             ResponseCode.MESSAGE_NOT_FOUND, "not-this-one"),
            (RequestCode.ACK_MESSAGE,
             m.AckRequest(group="g", topic="Orders", queue_id=0, queue_offset=99,
                          msg_id=good.msg_id),
             ResponseCode.MESSAGE_NOT_FOUND, "queue offset 99"),
        ]
        for code, body, expected, words in cases:
            error = client.error_of(code, body)
            assert error.code == expected, (code.name, error)
            assert words in error.body.message and not error.body.retriable
        wait_until(lambda: healthy.still_answered(before), timeout=10,
                   message="the healthy client kept being served")
        # nothing changed: one message visible, the half still pending and committable
        assert [msg.body for msg in client.pull("Orders", 0, max_messages=10).messages] == [
            b"kept"]
        done = client.call(RequestCode.END_TRANSACTION, _end(tx))
        assert done.outcome == "committed"
        again = client.error_of(RequestCode.END_TRANSACTION, _end(tx, state=m.TxState.ROLLBACK))
        assert again.code == ResponseCode.TRANSACTION_CONFLICT
