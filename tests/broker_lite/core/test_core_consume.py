"""Sending and consuming through the core: queues, order, acks, retries, DLQ, delays."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_lite.core import Broker, model
from broker_lite.core.topics import SCHEDULE_TOPIC
from broker_lite.errors import (
    InvalidMessageError,
    MessageNotFoundError,
    MessageTooLargeError,
    NoPermissionError,
    RequestError,
    ResponseCode,
    TopicNotFoundError,
)
from tests.broker_lite.core.core_support import Opener, make_broker, pull_all

pytestmark = pytest.mark.timeout(60)


def send(broker: Broker, topic: str, body: str, **fields: object) -> model.SendResult:
    return broker.send("pg", model.Message(topic=topic, body=body.encode(), **fields)).result


def test_round_robin_and_sharding_key_order(open_broker: Opener) -> None:
    broker = open_broker()
    queues = {send(broker, "Orders", f"m{i}").queue_id for i in range(8)}
    assert queues == {0, 1, 2, 3}
    keyed = [send(broker, "Orders", f"k{i}", sharding_key="customer-7") for i in range(20)]
    assert len({r.queue_id for r in keyed}) == 1
    queue = keyed[0].queue_id
    response = broker.pull(model.PullQuery(group="g", topic="Orders", queue_id=queue, offset=0,
                                           max_messages=100))
    bodies = [msg.body.decode() for msg in response.messages if msg.body.startswith(b"k")]
    assert bodies == [f"k{i}" for i in range(20)]


def test_pull_filters_tags_and_reports_offsets(open_broker: Opener) -> None:
    broker = open_broker()
    for i in range(10):
        send(broker, "Tags", f"m{i}", tags="even" if i % 2 == 0 else "odd", queue_id=0)
    response = broker.pull(model.PullQuery(group="g", topic="Tags", queue_id=0, offset=0,
                                           max_messages=100, tag_expr="even || none"))
    assert [msg.body for msg in response.messages] == [f"m{i}".encode() for i in (0, 2, 4, 6, 8)]
    assert (response.status, response.next_offset, response.max_offset) == ("found", 10, 10)
    empty = broker.pull(model.PullQuery(group="g", topic="Tags", queue_id=0, offset=10))
    assert empty.status == "no_new_message" and not empty.messages
    moved = broker.pull(model.PullQuery(group="g", topic="Tags", queue_id=0, offset=99))
    assert (moved.status, moved.next_offset) == ("offset_moved", 10)


def test_acks_advance_the_committed_offset_only_over_closed_gaps(open_broker: Opener) -> None:
    broker = open_broker()
    sent = [send(broker, "Acks", f"m{i}", queue_id=0) for i in range(5)]

    def ack(i: int) -> None:
        broker.ack(model.Ack(group="g", topic="Acks", queue_id=0,
                             queue_offset=sent[i].queue_offset, msg_id=sent[i].msg_id))

    def committed() -> int:
        return broker.query_offset(model.OffsetQuery(group="g", topic="Acks", queue_id=0))

    assert committed() == -1
    ack(1)
    ack(2)
    assert committed() == 0
    ack(0)
    assert committed() == 3
    ack(4)
    assert committed() == 3
    ack(3)
    assert committed() == 5


def test_filtered_units_count_as_consumed_between_acks(open_broker: Opener) -> None:
    broker = open_broker()
    sent = [send(broker, "Mixed", f"m{i}", tags="keep" if i in (0, 3) else "skip", queue_id=0)
            for i in range(5)]
    response = broker.pull(model.PullQuery(group="g", topic="Mixed", queue_id=0, offset=0,
                                           max_messages=10, tag_expr="keep"))
    assert [msg.queue_offset for msg in response.messages] == [0, 3]

    def committed() -> int:
        return broker.query_offset(model.OffsetQuery(group="g", topic="Mixed", queue_id=0))

    broker.mark_filtered("g", "Mixed", 0, [1, 2, 4])
    assert committed() == 0  # offset 0 is delivered but not acked: nothing moves past it
    broker.ack(model.Ack(group="g", topic="Mixed", queue_id=0, queue_offset=0,
                         msg_id=sent[0].msg_id))
    assert committed() == 3
    broker.ack(model.Ack(group="g", topic="Mixed", queue_id=0, queue_offset=3,
                         msg_id=sent[3].msg_id))
    assert committed() == 5


def test_ack_of_an_unknown_message_is_refused(open_broker: Opener) -> None:
    broker = open_broker()
    sent = send(broker, "Acks", "m", queue_id=0)
    for offset, msg_id in ((sent.queue_offset, "WRONG"), (sent.queue_offset + 5, sent.msg_id)):
        with pytest.raises(MessageNotFoundError) as info:
            broker.ack(model.Ack(group="g", topic="Acks", queue_id=0, queue_offset=offset,
                                 msg_id=msg_id))
        assert info.value.code == ResponseCode.MESSAGE_NOT_FOUND


def _last_scheduled_due(broker: Broker, level: int) -> int:
    """When the newest message on delay ``level`` falls due (its store time + delay)."""
    high = broker.store.queue_offsets(SCHEDULE_TOPIC, level - 1)[1]
    records, _ = broker.store.read_queue(SCHEDULE_TOPIC, level - 1, high - 1, 1)
    return records[0].store_timestamp + broker.delays.delay_ms(level)


def test_failed_message_is_retried_on_schedule_then_dead_lettered(open_broker: Opener) -> None:
    broker = open_broker(delay_time_scale=0.001)
    original = send(broker, "Work", "job", queue_id=0, keys=["job-1"])
    topic, queue_id, offset, msg_id = "Work", 0, original.queue_offset, original.msg_id
    deliveries = 1
    levels: list[int] = []
    while True:
        broker.send_back(model.SendBack(group="g", topic=topic, queue_id=queue_id,
                                        queue_offset=offset, msg_id=msg_id))
        dlq = broker.pull(model.PullQuery(group="x", topic="%DLQ%g", queue_id=0, offset=0))
        if dlq.messages:
            break
        level = min(3 + deliveries - 1, 18)
        levels.append(level)
        due = _last_scheduled_due(broker, level)
        retry_end = broker.store.queue_offsets("%RETRY%g", 0)[1]
        assert broker.delays.deliver_due(due - 1) == 0  # not a millisecond early
        assert broker.delays.deliver_due(due) == 1
        response = broker.pull(model.PullQuery(group="g", topic="%RETRY%g", queue_id=0,
                                               offset=retry_end))
        [message] = response.messages
        deliveries += 1
        assert message.reconsume_times == deliveries - 1
        assert message.msg_id == msg_id and message.properties["RETRY_TOPIC"] == "Work"
        topic, queue_id, offset = "%RETRY%g", 0, message.queue_offset
    assert deliveries == 1 + 16
    assert levels == list(range(3, 19))  # 10s, 30s, 1m ... 2h: RocketMQ's schedule
    [dead] = dlq.messages
    assert dead.body == b"job" and dead.msg_id == msg_id
    assert dead.properties["RETRY_TOPIC"] == "Work" and dead.keys == ["job-1"]


def test_delayed_message_is_invisible_until_due(open_broker: Opener) -> None:
    broker = open_broker()
    sent = send(broker, "Later", "tick", delay_level=2, queue_id=1)
    assert pull_all(broker, "Later") == []
    due = _last_scheduled_due(broker, 2)  # level 2 = 5 s
    assert broker.delays.deliver_due(due - 1) == 0
    assert broker.delays.deliver_due(due) == 1
    [message] = pull_all(broker, "Later")
    assert message.msg_id == sent.msg_id and message.queue_id == 1
    assert "DELAY" not in message.properties and "REAL_TOPIC" not in message.properties


def test_absolute_delivery_time(open_broker: Opener) -> None:
    broker = open_broker()
    at = int(time.time() * 1000) + 3_600_000
    send(broker, "Timer", "later", deliver_at_ms=at)
    assert broker.delays.deliver_due(at - 1) == 0
    assert broker.delays.deliver_due(at) == 1
    assert [msg.body for msg in pull_all(broker, "Timer")] == [b"later"]


def test_bad_input_is_refused_with_specific_errors(open_broker: Opener) -> None:
    broker = open_broker()
    with pytest.raises(InvalidMessageError) as info:
        send(broker, "bad topic!", "x")
    assert info.value.code == ResponseCode.INVALID_TOPIC
    with pytest.raises(MessageTooLargeError) as too_big:
        broker.send("pg", model.Message(topic="Big", body=b"x" * (4 * 1024 * 1024 + 1)))
    assert too_big.value.code == ResponseCode.MESSAGE_TOO_LARGE
    with pytest.raises(NoPermissionError):
        send(broker, "RMQ_SYS_TRANS_HALF_TOPIC", "sneaky")
    with pytest.raises(InvalidMessageError, match="keys"):
        send(broker, "Ok", "x", keys=["has space"])
    broker.create_topic(model.NewTopic(topic="ReadOnly", queues=2, perm=4))
    with pytest.raises(NoPermissionError, match="not writable"):
        send(broker, "ReadOnly", "x")


def test_auto_create_off(open_broker: Opener) -> None:
    broker = open_broker(auto_create_topics=False)
    with pytest.raises(TopicNotFoundError):
        send(broker, "Nope", "x")
    broker.create_topic(model.NewTopic(topic="Yes", queues=2))
    assert send(broker, "Yes", "x").queue_id in (0, 1)


def test_assignment_splits_queues_between_members(open_broker: Opener) -> None:
    from tests.broker_lite.core.core_support import ProducerEndpoint

    broker = open_broker()
    broker.create_topic(model.NewTopic(topic="Split", queues=5))
    for client in ("c1", "c2"):
        broker.register(model.ClientRegistration(client_id=client, subscriptions=[
            model.Subscription(group="g", topic="Split")]), ProducerEndpoint(client))
    shares = [broker.query_assignment(model.AssignmentQuery(client_id=c, group="g",
                                                            topic="Split")).queue_ids
              for c in ("c1", "c2")]
    assert shares == [[0, 1, 2], [3, 4]]
    broker.unregister("c2")
    assert broker.query_assignment(model.AssignmentQuery(
        client_id="c1", group="g", topic="Split")).queue_ids == [0, 1, 2, 3, 4]


def test_offsets_topics_and_delays_survive_restart(tmp_path: Path) -> None:
    broker = make_broker(tmp_path / "b")
    broker.create_topic(model.NewTopic(topic="Keep", queues=3))
    sent = send(broker, "Keep", "m", queue_id=2)
    broker.ack(model.Ack(group="g", topic="Keep", queue_id=2, queue_offset=sent.queue_offset,
                         msg_id=sent.msg_id))
    send(broker, "Keep", "later", delay_level=1, queue_id=0)
    broker.close()
    again = make_broker(tmp_path / "b")
    try:
        assert again.topic_route("Keep").queues == 3
        assert again.query_offset(model.OffsetQuery(group="g", topic="Keep", queue_id=2)) == 1
        assert again.delays.deliver_due(int(time.time() * 1000) + 2_000) == 1
    finally:
        again.close()


def test_queue_ids_outside_the_topic_are_refused(open_broker: Opener) -> None:
    broker = open_broker()
    send(broker, "Four", "x")
    for queue_id in (-1, 4, 70000):
        with pytest.raises(RequestError, match=f"queue {queue_id} does not exist"):
            broker.pull(model.PullQuery(group="g", topic="Four", queue_id=queue_id, offset=0))
        with pytest.raises(RequestError, match="does not exist"):
            broker.update_offset(model.OffsetUpdate(group="g", topic="Four",
                                                    queue_id=queue_id, offset=0))
