"""Issue 27's authorization attacks on the native door, each by another tenant, each
failing, while the owner's own work goes on in the same test.

Accounts (conftest): root admin; app Pub|Sub on Orders with producer group rocketbox;
inv Sub on Orders with group inventory; alice Pub|Sub on A only; bob Sub on A only.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker_lite.protocol import RequestCode
from broker_lite.protocol import messages as m
from tests.support import wait_until

SECRET = b"SECRET-ORDER card=4111111111111111"


def _dead_letter(tenants: Any) -> None:
    """app sends the secret order; inv fails it straight to %DLQ%inventory."""
    with tenants.wire("app") as app:
        app.send("Orders", SECRET, group="rocketbox", keys=["order-1"], queue_id=0)
    with tenants.wire("inv") as inv:
        (got,) = inv.pull("Orders", group="inventory").messages
        inv.call(RequestCode.CONSUMER_SEND_BACK, m.SendBackRequest(
            group="inventory", topic="Orders", queue_id=0, queue_offset=got.queue_offset,
            msg_id=got.msg_id, delay_level=-1))


@pytest.mark.timeout(120)
def test_retry_and_dead_letter_topics_belong_to_their_group(tenants: Any) -> None:
    _dead_letter(tenants)
    for thief in ("alice", "bob"):
        with tenants.wire(thief) as c:
            for group in (thief, "inventory"):
                why = tenants.refused(c, RequestCode.PULL_MESSAGE, m.PullRequest(
                    group=group, topic="%DLQ%inventory", queue_id=0, offset=0))
                assert "Group:" in why
            found = c.call(RequestCode.QUERY_MESSAGE_BY_KEY, m.QueryByKeyRequest(key="order-1"))
            assert found.messages == []
    with tenants.wire("alice") as alice:
        forged = m.WireMessage(topic="%RETRY%inventory", body=b"FAKE ORDER", queue_id=0,
                               properties={"RETRY_TOPIC": "Orders"})
        why = tenants.refused(alice, RequestCode.SEND_MESSAGE,
                              m.SendRequest(producer_group="alice", message=forged))
        assert "sends a message back" in why
        tenants.refused(alice, RequestCode.SEND_MESSAGE, m.SendRequest(
            producer_group="alice", message=m.WireMessage(topic="%DLQ%inventory", body=b"x")))
        tenants.refused(alice, RequestCode.UPDATE_CONSUMER_OFFSET, m.UpdateOffsetRequest(
            group="inventory", topic="Orders", queue_id=0, offset=0))
        tenants.refused(alice, RequestCode.UPDATE_CONSUMER_OFFSET, m.UpdateOffsetRequest(
            group="inventory", topic="%RETRY%inventory", queue_id=0, offset=0))
        # a member's send-back is the only way in: alice is no member of inventory
        tenants.refused(alice, RequestCode.CONSUMER_SEND_BACK, m.SendBackRequest(
            group="inventory", topic="A", queue_id=0, queue_offset=0, msg_id="x"))
    assert tenants.stored("%RETRY%inventory") == 0
    # the owner: inventory reads its dead letter, and finds it by key
    with tenants.wire("inv") as inv:
        (dead,) = inv.pull("%DLQ%inventory", group="inventory").messages
        assert dead.body == SECRET
        found = inv.call(RequestCode.QUERY_MESSAGE_BY_KEY, m.QueryByKeyRequest(key="order-1"))
        assert SECRET in [x.body for x in found.messages]


def _register_producer(client: Any, group: str) -> None:
    client.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(client_id=client.client_id,
                                                          producer_groups=[group]))


def _half(client: Any, body: bytes) -> m.SendResult:
    result: m.SendResult = client.send("Orders", body, group="rocketbox", queue_id=0,
                                       transactional=True)
    return result


@pytest.mark.timeout(120)
def test_only_the_producer_group_gets_its_check_backs(tenants: Any) -> None:
    with tenants.wire("alice") as alice:
        why = tenants.refused(alice, RequestCode.HEARTBEAT, m.HeartbeatRequest(
            client_id=alice.client_id, producer_groups=["rocketbox"]))
        assert "Group:rocketbox" in why
        with tenants.wire("app") as app:
            _register_producer(app, "rocketbox")
            half = _half(app, b"committed in the database")
            check = tenants.wait_check(app)
            assert check is not None, "the real checker was never asked"
            rid, request = check
            assert request.transaction_id == half.transaction_id
            tenants.answer_check(app, rid, m.TxState.COMMIT)
            assert tenants.wait_check(alice, timeout=1.0) is None
    with tenants.wire("inv") as inv:
        got: list[m.DeliveredMessage] = []

        def committed() -> bool:
            got[:] = inv.pull("Orders", group="inventory").messages
            return bool(got)

        wait_until(committed, timeout=30, message="the checker's COMMIT never landed")
        assert [x.body for x in got] == [b"committed in the database"]


@pytest.mark.timeout(120)
def test_older_file_format_still_loads_and_check_backs_skip_other_tenants(
        legacy_tenants: Any) -> None:
    """The older format lets any publisher register any producer group; the check-back
    (and the half's body) still goes only to who may publish to the half's topic."""
    with legacy_tenants.wire("alice") as alice, legacy_tenants.wire("app") as app:
        _register_producer(alice, "rocketbox")
        _register_producer(app, "rocketbox")
        half = _half(app, b"private half")
        for _ in range(3):  # three rounds of the check service, all to app
            check = legacy_tenants.wait_check(app)
            assert check is not None
            legacy_tenants.answer_check(app, check[0], m.TxState.UNKNOWN)
        assert legacy_tenants.wait_check(alice, timeout=0.5) is None
        tenants = legacy_tenants
        why = tenants.refused(alice, RequestCode.END_TRANSACTION, m.EndTransactionRequest(
            producer_group="rocketbox", transaction_id=half.transaction_id,
            state=m.TxState.ROLLBACK))
        assert "Topic:Orders" in why
        ended = app.call(RequestCode.END_TRANSACTION, m.EndTransactionRequest(
            producer_group="rocketbox", transaction_id=half.transaction_id,
            state=m.TxState.COMMIT))
        assert ended.outcome == "committed"
    assert legacy_tenants.stored("Orders") == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fixture", ["tenants", "legacy_tenants"])
def test_nobody_ends_another_producers_transaction(request: pytest.FixtureRequest,
                                                   fixture: str) -> None:
    tenants = request.getfixturevalue(fixture)
    with tenants.wire("app") as app, tenants.wire("alice") as alice:
        keep = _half(app, b"keep")
        drop = _half(app, b"drop")
        for half, state in ((keep, m.TxState.ROLLBACK), (drop, m.TxState.COMMIT)):
            for code, body in (
                    (RequestCode.END_TRANSACTION, m.EndTransactionRequest(
                        producer_group="rocketbox", transaction_id=half.transaction_id,
                        state=state)),
                    (RequestCode.END_TRANSACTION_BATCH, m.EndTransactionBatchRequest(items=[
                        m.EndTransactionRequest(producer_group="rocketbox",
                                                transaction_id=half.transaction_id,
                                                state=state)]))):
                if code == RequestCode.END_TRANSACTION:
                    tenants.refused(alice, code, body)
                else:
                    answer = alice.call(code, body)
                    assert answer.codes != [0] and answer.results == [None]
        ended = app.call(RequestCode.END_TRANSACTION, m.EndTransactionRequest(
            producer_group="rocketbox", transaction_id=keep.transaction_id,
            state=m.TxState.COMMIT))
        assert ended.outcome == "committed"
        ended = app.call(RequestCode.END_TRANSACTION, m.EndTransactionRequest(
            producer_group="rocketbox", transaction_id=drop.transaction_id,
            state=m.TxState.ROLLBACK))
        assert ended.outcome == "rolled_back"
    with tenants.wire("inv") as inv:
        assert [x.body for x in inv.pull("Orders", group="inventory").messages] == [b"keep"]


@pytest.mark.timeout(120)
def test_no_topic_or_group_flood_without_create(tenants: Any) -> None:
    before = tenants.topics()
    with tenants.wire("bob") as bob:
        for i in range(3):
            tenants.refused(bob, RequestCode.SEND_MESSAGE, m.SendRequest(
                producer_group="bob", message=m.WireMessage(topic=f"%RETRY%flood{i:04d}",
                                                            body=b"x")))
            tenants.refused(bob, RequestCode.UPDATE_CONSUMER_OFFSET, m.UpdateOffsetRequest(
                group=f"flood{i:04d}", topic="A", queue_id=0, offset=0))
            tenants.refused(bob, RequestCode.HEARTBEAT, m.HeartbeatRequest(
                client_id=bob.client_id,
                consumers=[m.ConsumerSubscription(group=f"flood{i:04d}", topic="A")]))
        tenants.refused(bob, RequestCode.TOPIC_CREATE, m.TopicCreateRequest(topic="flood"))
        # the owner of A's reads: bob's own group works
        bob.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(
            client_id=bob.client_id, consumers=[m.ConsumerSubscription(group="bob", topic="A")]))
        bob.call(RequestCode.UPDATE_CONSUMER_OFFSET, m.UpdateOffsetRequest(
            group="bob", topic="A", queue_id=0, offset=0))
    with tenants.wire("root") as root:  # nobody creates under the broker's prefixes
        for name in ("%RETRY%made", "%DLQ%made"):
            why = tenants.refused(root, RequestCode.TOPIC_CREATE, m.TopicCreateRequest(topic=name))
            assert "reserved" in why
        groups = root.call(RequestCode.CONSUMER_GROUPS, m.Empty())
    assert tenants.topics() == before | {"%RETRY%bob"}
    assert "flood" not in repr(groups)


@pytest.mark.timeout(120)
def test_no_client_id_takeover(tenants: Any) -> None:
    with tenants.wire("inv", "inv-1") as inv:
        inv.call(RequestCode.HEARTBEAT, m.HeartbeatRequest(
            client_id="inv-1", consumers=[m.ConsumerSubscription(group="inventory",
                                                                 topic="Orders")]))
        with tenants.wire("alice", "inv-1") as alice:
            why = tenants.refused(alice, RequestCode.HEARTBEAT, m.HeartbeatRequest(
                client_id="inv-1", consumers=[m.ConsumerSubscription(group="alice", topic="A")]))
            assert "in use" in why
            alice.call(RequestCode.UNREGISTER_CLIENT, m.HeartbeatRequest(client_id="inv-1"))
        assignment = inv.call(RequestCode.QUERY_ASSIGNMENT, m.QueryAssignmentRequest(
            client_id="inv-1", group="inventory", topic="Orders"))
        assert assignment.queue_ids == [0]  # still a member of its group
        assert "inv-1" in _connected(tenants)
        inv.call(RequestCode.UNREGISTER_CLIENT, m.HeartbeatRequest(client_id="inv-1"))
        assert "inv-1" not in _connected(tenants)  # its own unregister works


def _connected(tenants: Any) -> set[str]:
    with tenants.wire("root") as root:
        return {c.client_id for c in root.call(RequestCode.CONSUMER_GROUPS, m.Empty()).clients}


@pytest.mark.timeout(120)
def test_client_supplied_values_cannot_forge_log_lines(tenants: Any) -> None:
    forged = "order-9\nFORGED broker_lite.server: admin logged in"
    with tenants.wire("app") as app:
        app.send("Orders", b"x", group="rocketbox", msg_id=forged, queue_id=0)
    with tenants.wire("inv") as inv:
        (got,) = inv.pull("Orders", group="inventory").messages
        inv.call(RequestCode.CONSUMER_SEND_BACK, m.SendBackRequest(
            group="inventory", topic="Orders", queue_id=0, queue_offset=got.queue_offset,
            msg_id=got.msg_id, delay_level=-1))
    tenants.server.stop()
    log = tenants.server.stderr_text()
    assert "order-9\\x0aFORGED" in log
    assert not any(line.startswith("FORGED") for line in log.splitlines())
