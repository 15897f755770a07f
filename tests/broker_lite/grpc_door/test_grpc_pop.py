"""PopService on a real Broker, with a clock the test moves: no server, no waiting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from broker_lite.core import Broker, BrokerConfig, model
from broker_lite.grpc_door import GrpcDoorConfig, GrpcDoorError
from broker_lite.grpc_door.pop import Delivery, PopRecord, PopService, ReceiveSpec
from broker_lite.grpc_door.status import Code
from broker_lite.storage import StoreConfig
from tests.broker_lite.grpc_door.grpc_support import Clock

pytestmark = [pytest.mark.grpc, pytest.mark.timeout(30)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(BrokerConfig(store=StoreConfig(data_dir=tmp_path / "b", segment_size=1 << 20)))
    b.create_topic(model.NewTopic(topic="T", queues=1))
    yield b
    b.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _pop(broker: Broker, clock: Clock, alive: set[str] | None = None,
         **config: object) -> PopService:
    live = alive if alive is not None else set()
    return PopService(broker, GrpcDoorConfig(**config),  # type: ignore[arg-type]
                      client_alive=live.__contains__, clock=clock, wall=lambda: clock.now)


def _send(broker: Broker, *bodies: str, group: str | None = None, tag: str | None = None
          ) -> None:
    for body in bodies:
        broker.send("p", model.Message(topic="T", body=body.encode(), sharding_key=group,
                                       tags=tag))


def _spec(batch: int = 16, invisible_ms: int = 1000, tag: str = "*", auto_renew: bool = False,
          max_attempts: int = 17) -> ReceiveSpec:
    return ReceiveSpec(group="g", topic="T", batch=batch, invisible_ms=invisible_ms,
                       client_id="c1", max_attempts=max_attempts, tag_expr=tag,
                       auto_renew=auto_renew)


def _bodies(found: list[Delivery]) -> list[str]:
    return [d.message.body.decode() for d in found]


def _committed(broker: Broker) -> int:
    return broker.offsets.committed("g", "T", 0)


def test_acks_in_any_order_advance_the_committed_offset(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    _send(broker, "a", "b", "c", "d", "e")
    found = pop.receive(_spec())
    assert _bodies(found) == ["a", "b", "c", "d", "e"]
    assert {d.attempt for d in found} == {1}
    for index in (4, 0, 1):
        pop.ack("g", "T", found[index].receipt_handle)
    assert _committed(broker) == 2
    for index in (2, 3):
        pop.ack("g", "T", found[index].receipt_handle)
    assert _committed(broker) == 5 and pop.in_flight("g", "T") == 0
    pop.ack("g", "T", found[0].receipt_handle)  # acking twice is harmless
    assert pop.receive(_spec()) == []


def test_unacked_message_comes_back_after_its_deadline(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    _send(broker, "job")
    (first,) = pop.receive(_spec(invisible_ms=1000))
    clock.now += 0.999
    assert pop.receive(_spec()) == []
    assert pop.next_deadline("g", "T") == pytest.approx(clock.now + 0.001)
    clock.now += 0.001
    (second,) = pop.receive(_spec(invisible_ms=5000))
    assert (second.attempt, second.message.msg_id) == (2, first.message.msg_id)
    with pytest.raises(GrpcDoorError) as stale:
        pop.ack("g", "T", first.receipt_handle)
    assert stale.value.code == Code.INVALID_RECEIPT_HANDLE
    pop.ack("g", "T", second.receipt_handle)
    assert _committed(broker) == 1


def test_a_message_group_has_one_message_in_flight(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    _send(broker, "g1-a", "g1-b", group="g1")
    _send(broker, "g2-a", group="g2")
    _send(broker, "free-1", "free-2")
    first = pop.receive(_spec())
    assert _bodies(first) == ["g1-a", "g2-a", "free-1", "free-2"]
    assert pop.receive(_spec()) == []  # g1-b waits for g1-a
    clock.now += 1.0  # g1-a expires unacked: it comes back before g1-b
    again = pop.receive(_spec())
    assert _bodies(again) == ["g1-a", "g2-a", "free-1", "free-2"]
    pop.ack("g", "T", again[0].receipt_handle)
    assert _bodies(pop.receive(_spec())) == ["g1-b"]


def test_max_delivery_attempts_then_the_dlq(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    _send(broker, "poison", "fine")
    first = pop.receive(_spec(max_attempts=2))
    assert [(d.message.body, d.attempt) for d in first] == [(b"poison", 1), (b"fine", 1)]
    pop.ack("g", "T", first[1].receipt_handle)
    clock.now += 1.0
    second = pop.receive(_spec(max_attempts=2))
    assert [(d.message.body, d.attempt) for d in second] == [(b"poison", 2)]
    clock.now += 1.0
    assert pop.receive(_spec(max_attempts=2)) == []
    assert _committed(broker) == 2  # dead-lettered counts as consumed
    dlq = broker.pull(model.PullQuery(group="x", topic="%DLQ%g", queue_id=0, offset=0))
    assert [msg.body for msg in dlq.messages] == [b"poison"]


def test_messages_filtered_out_are_consumed(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    for i in range(6):
        _send(broker, f"m{i}", tag="keep" if i % 3 == 0 else "skip")
    found = pop.receive(_spec(tag="keep"))
    assert _bodies(found) == ["m0", "m3"]
    for delivery in found:
        pop.ack("g", "T", delivery.receipt_handle)
    assert _committed(broker) == 6


def test_without_a_saved_state_unacked_messages_come_again_from_the_committed_offset(
        broker: Broker, clock: Clock) -> None:
    _send(broker, "a", "b", "c")
    before = _pop(broker, clock)
    found = before.receive(_spec(invisible_ms=60_000))
    before.ack("g", "T", found[0].receipt_handle)
    after = _pop(broker, clock)  # the in-memory state is gone, nothing restored
    again = after.receive(_spec())
    assert [(d.message.body, d.attempt) for d in again] == [(b"b", 1), (b"c", 1)]
    with pytest.raises(GrpcDoorError):
        after.ack("g", "T", found[1].receipt_handle.rsplit(":", 1)[0] + ":other")


def test_auto_renewed_messages_are_held_while_the_client_lives(broker: Broker,
                                                                clock: Clock) -> None:
    alive = {"c1"}
    pop = _pop(broker, clock, alive, auto_renew_invisible_seconds=1.0)
    _send(broker, "held")
    (held,) = pop.receive(_spec(auto_renew=True))
    clock.now += 10
    assert pop.receive(_spec()) == []  # renewed ten times over
    assert pop.client_gone("c1") == 1
    alive.clear()
    clock.now += 1.0  # invisible_when_client_gone_seconds
    (back,) = pop.receive(_spec())
    assert (back.message.msg_id, back.attempt) == (held.message.msg_id, 2)


def test_change_invisible_duration(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    _send(broker, "x")
    (first,) = pop.receive(_spec(invisible_ms=1000))
    handle = pop.change_invisible("g", "T", first.receipt_handle, first.message.msg_id, 5000)
    assert handle != first.receipt_handle
    clock.now += 4.9
    assert pop.receive(_spec()) == []
    now_visible = pop.change_invisible("g", "T", handle, "", 0)
    (second,) = pop.receive(_spec())
    assert second.attempt == 2
    with pytest.raises(GrpcDoorError):
        pop.ack("g", "T", now_visible)  # received again since: that handle is stale
    with pytest.raises(GrpcDoorError) as wrong_id:
        pop.ack("g", "T", second.receipt_handle, "NOT-THE-ID")
    assert wrong_id.value.code == Code.INVALID_RECEIPT_HANDLE


@pytest.mark.parametrize("handle", ["", "garbage", "1:2", "a:b:c", "0:99:token"])
def test_receipt_handles_that_were_never_issued(broker: Broker, clock: Clock,
                                                handle: str) -> None:
    pop = _pop(broker, clock)
    with pytest.raises(GrpcDoorError) as info:
        pop.ack("g", "T", handle)
    assert info.value.code == Code.INVALID_RECEIPT_HANDLE


def _dlq_bodies(broker: Broker) -> list[bytes]:
    if broker.topics.get("%DLQ%g") is None:
        return []
    dlq = broker.pull(model.PullQuery(group="x", topic="%DLQ%g", queue_id=0, offset=0))
    return [msg.body for msg in dlq.messages]


def test_the_revive_dead_letters_without_a_poll(broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock, max_delivery_attempts=2)
    _send(broker, "poison")
    pop.receive(_spec(max_attempts=2))
    clock.now += 1.0
    pop.receive(_spec(max_attempts=2))  # the second and last delivery, never acked
    clock.now += 0.5
    assert pop.revive() == (0, set())  # still invisible
    assert _dlq_bodies(broker) == []
    clock.now += 0.5
    assert pop.revive() == (1, set())
    assert _dlq_bodies(broker) == [b"poison"]
    assert _committed(broker) == 1 and pop.in_flight("g", "T") == 0


def test_the_revive_makes_expired_messages_visible_and_names_their_topic(
        broker: Broker, clock: Clock) -> None:
    pop = _pop(broker, clock)
    _send(broker, "job")
    pop.receive(_spec())
    clock.now += 1.0
    assert pop.revive() == (0, {"T"})
    assert [d.attempt for d in pop.receive(_spec())] == [2]


def test_a_restart_restores_attempts_deadlines_and_receipt_handles(
        broker: Broker, clock: Clock) -> None:
    _send(broker, "a", "b", "c")
    before = _pop(broker, clock)
    first = before.receive(_spec(invisible_ms=1000))
    clock.now += 1.0
    assert len(first) == 3
    second = before.receive(_spec(batch=2, invisible_ms=30_000))  # a, b again: attempt 2
    records = before.snapshot()  # c is visible, delivered once
    assert sorted((r.offset, r.attempts, bool(r.deadline_ms)) for r in records) == [
        (0, 2, True), (1, 2, True), (2, 1, False)]

    clock.now += 10.0  # the broker was down for 10 s
    after = _pop(broker, clock)
    assert after.restore(records) == 3
    (c,) = after.receive(_spec(invisible_ms=60_000))  # a and b: still invisible for 20 s
    assert (c.message.body, c.attempt) == (b"c", 2)
    after.ack("g", "T", second[0].receipt_handle)  # the old handle still acks
    clock.now += 20.0
    (again,) = after.receive(_spec())
    assert (again.message.body, again.attempt) == (b"b", 3)
    assert after.restore(records) == 0  # a is acked, b and c are in flight: nothing twice


def _last_delivery_snapshot(broker: Broker, clock: Clock) -> list[PopRecord]:
    """A message delivered for the last time (one attempt allowed, 5 s invisible); the pop
    state a restart would load."""
    _send(broker, "poison")
    before = _pop(broker, clock, max_delivery_attempts=1)
    before.receive(_spec(max_attempts=1, invisible_ms=5000))
    return before.snapshot()


def test_a_restart_after_the_last_delivery_dead_letters_at_the_deadline(
        broker: Broker, clock: Clock) -> None:
    records = _last_delivery_snapshot(broker, clock)
    after = _pop(broker, clock, max_delivery_attempts=1)
    after.restore(records)
    assert after.revive() == (0, set())
    clock.now += 5.0
    assert after.revive() == (1, set())
    assert _dlq_bodies(broker) == [b"poison"]


def test_restore_drops_what_was_settled_or_is_gone(broker: Broker, clock: Clock) -> None:
    _send(broker, "a", "b")
    before = _pop(broker, clock)
    found = before.receive(_spec())
    records = before.snapshot()
    before.ack("g", "T", found[0].receipt_handle)
    stale = [records[0], replace(records[1], msg_id="NOT-THERE"),
             replace(records[1], topic="Nope"), replace(records[1], queue_id=7)]
    assert _pop(broker, clock).restore(stale) == 0


def test_a_restart_that_outlasted_the_deadline_dead_letters_at_the_next_round(
        broker: Broker, clock: Clock) -> None:
    records = _last_delivery_snapshot(broker, clock)
    clock.now += 60.0  # the broker was down longer than the invisible duration
    after = _pop(broker, clock, max_delivery_attempts=1)
    assert after.restore(records) == 1
    assert after.revive() == (1, set())  # nobody polls
    assert _dlq_bodies(broker) == [b"poison"]
