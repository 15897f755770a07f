"""The batch requests under an ACL: each item is authorised on its own, in one request.

``END_TRANSACTION_BATCH`` ends the items the account may end together in the
core and answers the others with the refusal, each answer in its item's place.
An attacker slipping another producer's transactions into a batch of its own
ends only its own; the owner then ends hers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_lite.errors import ResponseCode
from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from tests.broker_lite.server.server_wire import StartBroker, WireClient, signed_hello
from tests.support import BrokerLiteServer

pytestmark = pytest.mark.timeout(60)


def _allow(resource: str, *actions: str) -> dict[str, Any]:
    return {"resource": resource, "actions": list(actions), "decision": "Allow"}


ACL: dict[str, Any] = {
    "version": 2,
    "accounts": [
        {"access_key": "root", "secret_key": "root-secret", "admin": True,
         "policies": [_allow("Topic:*", "All"), _allow("Group:*", "All")]},
        {"access_key": "app", "secret_key": "app-secret",
         "policies": [_allow("Topic:Orders", "Pub", "Sub"), _allow("Group:rocketbox", "Pub"),
                      _allow("Group:app", "Sub")]},
        {"access_key": "alice", "secret_key": "alice-secret",
         "policies": [_allow("Topic:A", "Pub", "Sub"), _allow("Group:alice", "Pub", "Sub")]},
    ],
}


@pytest.fixture
def secured(start_broker: StartBroker, tmp_path: Path) -> Iterator[BrokerLiteServer]:
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(ACL))
    with start_broker("--acl", str(path), "--tx-timeout", "3600") as server:
        with WireClient(server.native, client_id="admin",
                        hello=signed_hello("admin", "root", "root-secret")) as root:
            root.create_topic("Orders", queues=1)
            root.create_topic("A", queues=1)
        yield server


def _wire(server: BrokerLiteServer, key: str) -> WireClient:
    return WireClient(server.native, client_id=f"{key}-1",
                      hello=signed_hello(f"{key}-1", key, f"{key}-secret"))


def _halves(client: WireClient, topic: str, group: str, n: int) -> list[m.SendResult]:
    answer = client.call(RequestCode.SEND_BATCH, m.SendBatchRequest(
        producer_group=group, messages=[m.WireMessage(topic=topic, body=b"%s-%d" % (
            topic.encode(), i), transactional=True) for i in range(n)]))
    assert [item.code for item in answer.results] == [ResponseCode.SUCCESS] * n
    return [item.result for item in answer.results]


def _end(group: str, half: m.SendResult, state: int) -> m.EndTransactionRequest:
    return m.EndTransactionRequest(producer_group=group, transaction_id=half.transaction_id,
                                   state=state, commit_log_offset=half.commit_log_offset)


def _visible(server: BrokerLiteServer, topic: str) -> list[bytes]:
    with _wire(server, "root") as root:
        return sorted(msg.body for msg in root.pull(topic, group="audit").messages)


def test_a_batch_ends_only_the_transactions_the_account_may_end(
        secured: BrokerLiteServer) -> None:
    commit, rollback = m.TxState.COMMIT, m.TxState.ROLLBACK
    with _wire(secured, "app") as app, _wire(secured, "alice") as alice:
        theirs = _halves(app, "Orders", "rocketbox", 3)
        mine = _halves(alice, "A", "alice", 3)
        answer = alice.call(RequestCode.END_TRANSACTION_BATCH, m.EndTransactionBatchRequest(
            items=[_end("alice", mine[0], commit), _end("rocketbox", theirs[0], rollback),
                   _end("alice", mine[1], rollback), _end("alice", theirs[1], commit),
                   _end("rocketbox", theirs[2], commit), _end("alice", mine[2], commit)]))
        ok = ResponseCode.SUCCESS
        assert [code == ok for code in answer.codes] == [True, False, True, False, False, True]
        assert [r.outcome if r else None for r in answer.results] == [
            "committed", None, "rolled_back", None, None, "committed"]
        assert all((error is None) == (code == ok)
                   for code, error in zip(answer.codes, answer.errors, strict=True))
        assert _visible(secured, "A") == [b"A-0", b"A-2"]
        assert _visible(secured, "Orders") == []
        owner = app.call(RequestCode.END_TRANSACTION_BATCH, m.EndTransactionBatchRequest(
            items=[_end("rocketbox", half, commit) for half in theirs]))
        assert [r.outcome for r in owner.results] == ["committed"] * 3
        assert owner.codes == [ok] * 3
    assert _visible(secured, "Orders") == [b"Orders-0", b"Orders-1", b"Orders-2"]
